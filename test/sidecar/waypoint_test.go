package sidecar

import (
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/istio/upgrade"
	"github.com/nodewise/nodewise/revisions/revtag"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/testkit"
)

var gatewaysGVR = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gateways"}

// waypointFake plays istiod's waypoint controller, which nobody runs in the
// simulated cluster: for a Gateway of class istio-waypoint it creates the
// Deployment istiod would (its labels, the revision in the pod template's
// istio.io/rev annotation, that revision's proxy image), and reconcile
// updates that template when the Gateway's label has changed. The tests call
// it after each change; istiod would react to the watch.
type waypointFake struct {
	e   *env
	dyn dynamic.Interface
	// versions maps each installed revision to its proxy version.
	versions map[string]string
}

// waypoints installs the Gateway CRD and returns the stand-in.
func (e *env) waypoints(versions map[string]string) *waypointFake {
	e.t.Helper()
	if err := cluster.InstallCRD(e.ctx, e.c.Config, filepath.Join("testdata", "gateway-crd.yaml")); err != nil {
		e.t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(e.c.Config)
	if err != nil {
		e.t.Fatal(err)
	}
	return &waypointFake{e: e, dyn: dyn, versions: versions}
}

// gateway creates a waypoint Gateway, labelled istio.io/rev=rev unless rev
// is empty, and its Deployment.
func (w *waypointFake) gateway(ns, name, rev string) {
	w.e.t.Helper()
	gw := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
		"metadata": map[string]any{"namespace": ns, "name": name},
		"spec": map[string]any{"gatewayClassName": istio.WaypointGatewayClass,
			"listeners": []any{map[string]any{"name": "mesh", "port": int64(15008), "protocol": "HBONE"}}},
	}}
	if rev != "" {
		gw.SetLabels(map[string]string{istio.LabelRev: rev})
	}
	if _, err := w.dyn.Resource(gatewaysGVR).Namespace(ns).Create(w.e.ctx, gw, metav1.CreateOptions{}); err != nil {
		w.e.t.Fatal(err)
	}
	w.reconcile(ns, name)
}

// reconcile picks the Gateway's revision as istiod does (its istio.io/rev,
// else its namespace's, else the default tag; a tag resolved) and makes the
// Deployment's pod template say it.
func (w *waypointFake) reconcile(ns, name string) {
	w.e.t.Helper()
	ctx, cs := w.e.ctx, w.e.c.Client
	gw, err := w.dyn.Resource(gatewaysGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		w.e.t.Fatal(err)
	}
	sel := gw.GetLabels()[istio.LabelRev]
	if sel == "" {
		n, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			w.e.t.Fatal(err)
		}
		sel = n.Labels[istio.LabelRev]
	}
	if sel == "" {
		sel = istio.DefaultTag
	}
	rev := sel
	if _, ok := w.versions[sel]; !ok {
		if rev, err = revtag.Get(ctx, cs, sel); err != nil {
			w.e.t.Fatalf("waypoint %s/%s selects %q: %v", ns, name, sel, err)
		}
	}
	labels := map[string]string{istio.LabelGatewayManaged: istio.GatewayManagedWaypoint, istio.LabelK8sGatewayName: name, istio.LabelGatewayName: name}
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{
			Labels:      map[string]string{istio.LabelGatewayManaged: istio.GatewayManagedWaypoint, istio.LabelK8sGatewayName: name, istio.LabelInject: "false", istio.LabelDataplaneMode: istio.DataplaneModeNone},
			Annotations: map[string]string{istio.LabelRev: rev},
		},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{Name: istio.ProxyContainer, Image: "docker.io/istio/proxyv2:" + w.versions[rev], Args: []string{"proxy", "waypoint"}}}},
	}
	deps := cs.AppsV1().Deployments(ns)
	d, err := deps.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = deps.Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			Spec: appsv1.DeploymentSpec{Replicas: ptr(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{istio.LabelK8sGatewayName: name}}, Template: tmpl}}, metav1.CreateOptions{})
	} else if err == nil {
		d.Spec.Template = tmpl
		_, err = deps.Update(ctx, d, metav1.UpdateOptions{})
	}
	if err != nil {
		w.e.t.Fatal(err)
	}
}

// nodewiseFails runs the CLI expecting it to fail and returns its stderr.
func nodewiseFails(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, args...).Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("nodewise %s: want a failure, got %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(ee.Stderr)
}

// TestWaypointsThroughTheUpgrade: three waypoints (two on 1-27, one by its
// namespace having no label and the default tag on 1-27; one on 1-28) show in
// `nodewise inventory` with their revisions and versions, `freshness` names
// the stale ones, `revision remove 1-28` is refused while the 1-28 waypoint
// runs it, naming it; `upgrade status` puts the waypoints after the node
// components, and once the plan's label changes are made (kubectl running
// the plan's own commands) and the waypoints have rolled, moves on; the
// real istioctl lists the waypoints on the revision they were moved to.
func TestWaypointsThroughTheUpgrade(t *testing.T) {
	e := start(t, 3, "1.27.3", "1.28.1")
	ctx, cs := e.ctx, e.c.Client
	wp := e.waypoints(map[string]string{"1-27": "1.27.3", "1-28": "1.28.1"})
	ambient := map[string]string{istio.LabelDataplaneMode: istio.DataplaneModeAmbient, istio.LabelUseWaypoint: "waypoint"}
	e.namespace("mesh", ambient)
	e.namespace("pay", map[string]string{istio.LabelDataplaneMode: istio.DataplaneModeAmbient, istio.LabelUseWaypoint: "reviews"})
	e.namespace("edge", ambient)
	wp.gateway("mesh", "waypoint", "1-27")
	wp.gateway("pay", "reviews", "")
	wp.gateway("edge", "waypoint", "1-28")
	bin := testkit.Binary(t, "nodewise")
	kc := "--kubeconfig=" + e.c.Kubeconfig
	row := func(ref, rev, version string) *regexp.Regexp {
		return regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(ref) + `\s+` + rev + `\s+` + regexp.QuoteMeta(version) + `\s+1/1$`)
	}
	testkit.WaitFor(t, time.Minute, "the waypoints Ready in the inventory", func() (bool, error) {
		out := nodewiseCLI(t, bin, kc, "inventory")
		for _, r := range []*regexp.Regexp{row("edge/waypoint", "1-28", "1.28.1"), row("mesh/waypoint", "1-27", "1.27.3"), row("pay/reviews", "1-27", "1.27.3")} {
			if !r.MatchString(out) {
				return false, errors.New("no row " + r.String() + " in\n" + out)
			}
		}
		return true, nil
	})
	if line := strings.SplitN(nodewiseCLI(t, bin, kc, "freshness", "--to", "1.28.1"), "\n", 2)[0]; !strings.Contains(line, "; waypoints: 2 of 3 behind (mesh/waypoint 1.27.3, pay/reviews 1.27.3)") {
		t.Errorf("freshness line %q does not name the two stale waypoints", line)
	}

	stderr := nodewiseFails(t, bin, kc, "revision", "remove", "1-28")
	if !strings.Contains(stderr, "refusing to remove 1-28 while waypoints edge/waypoint run it") || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
		t.Fatalf("revision remove 1-28 with a waypoint on it: %q, want one line naming edge/waypoint", stderr)
	}
	if _, err := cs.AppsV1().Deployments(cluster.IstioNamespace).Get(ctx, "istiod-1-28", metav1.GetOptions{}); err != nil {
		t.Fatalf("refused removal deleted istiod 1-28: %v", err)
	}

	// The node components replaced (what the NodeRollout does node by
	// node); the waypoints are next.
	for _, sel := range []string{"app=ztunnel", "k8s-app=istio-cni-node"} {
		if err := cs.CoreV1().Pods(cluster.IstioNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel}); err != nil {
			t.Fatal(err)
		}
	}
	statusLine := func() string {
		return strings.SplitN(nodewiseCLI(t, bin, kc, "upgrade", "status", "--to", "1.28.1"), "\n", 2)[0]
	}
	testkit.WaitFor(t, time.Minute, "the waypoints next", func() (bool, error) {
		l := statusLine()
		return strings.Contains(l, "waypoints (pass 1): Next"), errors.New(l)
	})
	var plan upgrade.Plan
	if err := json.Unmarshal([]byte(nodewiseCLI(t, bin, kc, "upgrade", "plan", "--to", "1.28.1", "-o", "json")), &plan); err != nil {
		t.Fatal(err)
	}
	cur := plan.Current()
	if cur == nil || cur.Name != "waypoints" || strings.Count(cur.Do, "kubectl label gateway") != 2 {
		t.Fatalf("current step %+v, want the waypoints with one label change per stale waypoint", cur)
	}
	kubectl := tool(t, "kubectl", "make tools")
	for _, c := range strings.Split(cur.Do, "; ") {
		args := strings.Fields(c)
		if out, err := exec.Command(kubectl, append(args[1:], kc)...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", c, err, out)
		}
	}
	wp.reconcile("mesh", "waypoint")
	wp.reconcile("pay", "reviews")
	testkit.WaitFor(t, time.Minute, "the waypoints rolled onto 1-28", func() (bool, error) {
		l := statusLine()
		return strings.Contains(l, "default tag (pass 1): Next"), errors.New(l)
	})

	list := runIstioctl(t, e.c.Kubeconfig, "waypoint", "list", "-A")
	for _, want := range []string{`edge\s+waypoint\s+1-28`, `mesh\s+waypoint\s+1-28`, `pay\s+reviews\s+1-28`} {
		if !regexp.MustCompile(`(?m)^` + want + `\s`).MatchString(list) {
			t.Errorf("istioctl waypoint list -A lacks %s:\n%s", want, list)
		}
	}
}
