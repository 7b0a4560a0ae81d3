package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	probemanifest "github.com/nodewise/nodewise/deploy/probe"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/sim/dataplane"
)

// ProbeTraffic is what the live rig's probes send: modest, as the rig shares
// a few cores with everything else, yet enough for the judge to find a 25%
// reset share or a slower connect within a soak of seconds on a drained node.
type ProbeTraffic struct {
	Rate        float64       // short requests a second per probe (default 10)
	Streams     int           // long-lived streams per probe (default 2)
	StreamEvery time.Duration // a line on each stream this often (default 1 s)
}

func (p *ProbeTraffic) defaults() {
	if p.Rate == 0 {
		p.Rate = 10
	}
	if p.Streams == 0 {
		p.Streams = 2
	}
	if p.StreamEvery == 0 {
		p.StreamEvery = time.Second
	}
}

// installProbe applies deploy/probe/probe.yaml (the Namespace, enrolled in
// ambient, its ServiceAccount, the headless Service and the DaemonSet
// nodewise-probe) with the DaemonSet's --rate, --streams and --stream-every
// set to tr, and waits until a probe pod is Ready on every one of nodes.
// The live data plane runs the real probe in each of those pods.
func installProbe(ctx context.Context, c kubernetes.Interface, nodes int, tr ProbeTraffic) error {
	tr.defaults()
	dec := k8syaml.NewYAMLOrJSONDecoder(bytes.NewReader(probemanifest.Manifest), 4096)
	for {
		var raw map[string]any
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("reading deploy/probe/probe.yaml: %w", err)
		}
		if raw == nil {
			continue
		}
		if err := applyProbeObject(ctx, c, raw, tr); err != nil {
			return err
		}
	}
	return waitProbes(ctx, c, nodes)
}

func applyProbeObject(ctx context.Context, c kubernetes.Interface, raw map[string]any, tr ProbeTraffic) error {
	data, err := yaml.Marshal(raw)
	if err != nil {
		return err
	}
	kind, _ := raw["kind"].(string)
	ns := health.DefaultProbeNamespace
	var cerr error
	switch kind {
	case "Namespace":
		var o corev1.Namespace
		if err := yaml.UnmarshalStrict(data, &o); err != nil {
			return fmt.Errorf("the probe's %s: %w", kind, err)
		}
		_, cerr = c.CoreV1().Namespaces().Create(ctx, &o, metav1.CreateOptions{})
	case "ServiceAccount":
		var o corev1.ServiceAccount
		if err := yaml.UnmarshalStrict(data, &o); err != nil {
			return fmt.Errorf("the probe's %s: %w", kind, err)
		}
		_, cerr = c.CoreV1().ServiceAccounts(ns).Create(ctx, &o, metav1.CreateOptions{})
	case "Service":
		var o corev1.Service
		if err := yaml.UnmarshalStrict(data, &o); err != nil {
			return fmt.Errorf("the probe's %s: %w", kind, err)
		}
		_, cerr = c.CoreV1().Services(ns).Create(ctx, &o, metav1.CreateOptions{})
	case "DaemonSet":
		var o appsv1.DaemonSet
		if err := yaml.UnmarshalStrict(data, &o); err != nil {
			return fmt.Errorf("the probe's %s: %w", kind, err)
		}
		setProbeArgs(&o, tr)
		_, cerr = c.AppsV1().DaemonSets(ns).Create(ctx, &o, metav1.CreateOptions{})
	default:
		return fmt.Errorf("deploy/probe/probe.yaml: unexpected kind %q", kind)
	}
	if cerr != nil && !apierrors.IsAlreadyExists(cerr) {
		return fmt.Errorf("creating the probe's %s: %w", kind, cerr)
	}
	return nil
}

// setProbeArgs replaces the probe container's --rate and --streams and sets
// --stream-every.
func setProbeArgs(ds *appsv1.DaemonSet, tr ProbeTraffic) {
	set := map[string]string{"rate": fmt.Sprint(tr.Rate), "streams": fmt.Sprint(tr.Streams), "stream-every": tr.StreamEvery.String()}
	cs := ds.Spec.Template.Spec.Containers
	if len(cs) == 0 {
		return
	}
	var args []string
	for _, a := range cs[0].Args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if _, ok := set[name]; !ok {
			args = append(args, a)
		}
	}
	for _, name := range []string{"rate", "streams", "stream-every"} {
		args = append(args, "--"+name+"="+set[name])
	}
	cs[0].Args = args
}

// waitProbes waits until a probe pod is Ready on each of nodes nodes.
func waitProbes(ctx context.Context, c kubernetes.Interface, nodes int) error {
	pods := c.CoreV1().Pods(health.DefaultProbeNamespace)
	sel := labels.SelectorFromSet(labels.Set{dataplane.ProbeLabel: dataplane.ProbeName})
	err := waitList(ctx, 2*time.Minute, cluster.ListWatch(pods.List, pods.Watch, metav1.ListOptions{LabelSelector: sel.String()}), &corev1.Pod{}, func(objs []any) (bool, string) {
		n := len(readyNodes(objs, sel))
		return n >= nodes, fmt.Sprintf("Ready on %d", n)
	})
	if err != nil {
		return fmt.Errorf("waiting for a Ready nodewise-probe pod on %d nodes: %w", nodes, err)
	}
	return nil
}
