package nodestep

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// DetectSwap says which swap a target DaemonSet supports, or, when neither,
// returns one line saying which chart value to set. Both need OnDelete, so
// that only nodewise replaces pods, in its order. ztunnel gets surge unless
// its pods claim host ports (two on one node would clash); istio-cni, and any
// DaemonSet that is not ztunnel, gets replace: two istio-cni agents on one
// node would fight over /var/run/ztunnel/ztunnel.sock.
func DetectSwap(ds *appsv1.DaemonSet) (model.SwapKind, string, error) {
	key := ds.Namespace + "/" + ds.Name
	if t := ds.Spec.UpdateStrategy.Type; t != appsv1.OnDeleteDaemonSetStrategyType {
		chart := "the chart"
		if isZtunnelDaemonSet(ds) {
			chart = "the ztunnel chart"
		}
		return "", "", fmt.Errorf("DaemonSet %s uses updateStrategy %s, under which the DaemonSet controller replaces pods itself, in its own order: set %s's value updateStrategy.type=OnDelete (helm upgrade --reuse-values --set updateStrategy.type=OnDelete) and re-apply; nodewise then swaps %s", key, t, chart, defaultSwapFor(ds))
	}
	if !isZtunnelDaemonSet(ds) {
		return model.SwapReplace, "replace (break-before-make): the old pod is deleted, then the DaemonSet creates the new one", nil
	}
	for _, c := range ds.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			if p.HostPort != 0 {
				return model.SwapReplace, fmt.Sprintf("replace (break-before-make): container %s claims host port %d, so two pods cannot share a node", c.Name, p.HostPort), nil
			}
		}
	}
	return model.SwapSurge, "surge (make-before-break): a new-version pod is Ready beside the old one before the old one goes, and the DaemonSet adopts it", nil
}

func defaultSwapFor(ds *appsv1.DaemonSet) model.SwapKind {
	if isZtunnelDaemonSet(ds) {
		return model.SwapSurge
	}
	return model.SwapReplace
}

// isZtunnelDaemonSet: named ztunnel, or running a ztunnel image.
func isZtunnelDaemonSet(ds *appsv1.DaemonSet) bool {
	if strings.Contains(ds.Name, "ztunnel") {
		return true
	}
	for _, c := range ds.Spec.Template.Spec.Containers {
		image := c.Image
		if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
			image = image[:i]
		}
		if strings.HasSuffix(image, "/ztunnel") {
			return true
		}
	}
	return false
}

// ForecastInput is what the plan predicts one node's disruption from: the
// pods bound to it, its agent's snapshot (or why there is none), the old
// ztunnel's drain deadline, the long-lived threshold and the swap.
type ForecastInput struct {
	Node      string
	Pods      []*corev1.Pod
	Snapshot  wire.Snapshot
	AgentErr  error
	Deadline  time.Duration
	LongLived time.Duration
	Swap      model.SwapKind
}

// WorkloadForecast is one workload's connections on one node.
type WorkloadForecast struct {
	// Workload is namespace/name of the pods' owner (a Deployment for
	// ReplicaSet pods), or of the pod itself.
	Workload string
	Pods     int
	// Outlive counts the connections that would outlive the old ztunnel's
	// drain deadline if the node were swapped in place now: open longer than
	// the long-lived threshold (they are expected to live on), app side.
	Outlive uint64
	// P99Age is the upper bound of the age bucket holding the 99th
	// percentile of the workload's open connections (0: none open);
	// P99Beyond is set when it is the open-ended last bucket.
	P99Age    time.Duration
	P99Beyond bool
}

// NodeForecast is one node's predicted disruption and drain auto's choice.
type NodeForecast struct {
	Node      string
	Drain     bool
	Reason    string
	AgentErr  error
	Workloads []WorkloadForecast
}

// Forecast predicts one node's disruption. It is pure.
func Forecast(in ForecastInput) NodeForecast {
	choice := DecideAuto(AutoInput{SwapsZtunnel: true, Swap: in.Swap, Deadline: in.Deadline, LongLived: in.LongLived,
		Pods: in.Pods, Snapshot: in.Snapshot, AgentErr: in.AgentErr})
	f := NodeForecast{Node: in.Node, Drain: choice.Drain, Reason: choice.Reason, AgentErr: in.AgentErr}
	if in.AgentErr != nil {
		return f
	}
	threshold := in.Deadline
	if in.LongLived > 0 && in.LongLived < threshold {
		threshold = in.LongLived
	}
	byUID := map[string]*wire.PodCounters{}
	for i := range in.Snapshot.Pods {
		if pc := &in.Snapshot.Pods[i]; pc.Side == wire.SideApp {
			byUID[pc.UID] = pc
		}
	}
	type acc struct {
		pods  int
		out   uint64
		hist  []uint64
		valid bool
	}
	work := map[string]*acc{}
	for _, p := range MovablePods(in.Pods) {
		w := workloadOf(p)
		a := work[w]
		if a == nil {
			a = &acc{hist: make([]uint64, len(wire.AgeBucketBoundsSeconds)+1)}
			work[w] = a
		}
		a.pods++
		pc := byUID[string(p.UID)]
		if pc == nil || len(pc.ConnAges) != len(a.hist) {
			continue
		}
		a.valid = true
		n, _ := health.MayBeOlderThan(pc.ConnAges, threshold)
		a.out += n
		for i, c := range pc.ConnAges {
			a.hist[i] += c
		}
	}
	for name, a := range work {
		wf := WorkloadForecast{Workload: name, Pods: a.pods, Outlive: a.out}
		if a.valid {
			wf.P99Age, wf.P99Beyond = p99(a.hist)
		}
		f.Workloads = append(f.Workloads, wf)
	}
	sort.Slice(f.Workloads, func(i, j int) bool { return f.Workloads[i].Workload < f.Workloads[j].Workload })
	return f
}

// p99 is the upper bound of the bucket holding the 99th percentile.
func p99(hist []uint64) (time.Duration, bool) {
	var total uint64
	for _, c := range hist {
		total += c
	}
	if total == 0 {
		return 0, false
	}
	rank := (total*99 + 99) / 100 // ceil(0.99 × total)
	var cum uint64
	for i, c := range hist {
		cum += c
		if cum >= rank {
			if i == len(wire.AgeBucketBoundsSeconds) {
				return time.Duration(wire.AgeBucketBoundsSeconds[i-1] * float64(time.Second)), true
			}
			return time.Duration(wire.AgeBucketBoundsSeconds[i] * float64(time.Second)), false
		}
	}
	return 0, false
}

// workloadOf names a pod's workload: its controller, with a ReplicaSet
// folded into its Deployment (the pod-template-hash suffix removed).
func workloadOf(p *corev1.Pod) string {
	for _, o := range p.OwnerReferences {
		if o.Controller == nil || !*o.Controller {
			continue
		}
		name := o.Name
		if o.Kind == "ReplicaSet" {
			if h := p.Labels["pod-template-hash"]; h != "" {
				name = strings.TrimSuffix(name, "-"+h)
			}
		}
		return p.Namespace + "/" + name
	}
	return p.Namespace + "/" + p.Name
}

// RenderForecast prints the predicted disruption per node, then the fleet
// summary: the nodes drain auto would drain, and the workloads whose
// connections outlive the deadline, with what to change.
func RenderForecast(w io.Writer, fs []NodeForecast, deadline, longLived time.Duration, swap model.SwapKind) error {
	threshold := deadline
	if longLived > 0 && longLived < threshold {
		threshold = longLived
	}
	fmt.Fprintf(w, "\nPredicted disruption if ztunnel were swapped now (%s; old ztunnel's drain deadline %s; a connection open longer than %s is expected to outlive it):\n", swap, deadline, threshold)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "NODE\tWORKLOAD\tPODS\tWOULD OUTLIVE DEADLINE\tP99 CONN AGE\tAUTO\n")
	drained := []string{}
	long := map[string]time.Duration{}
	for _, f := range fs {
		decision := "in place"
		if f.Drain {
			decision = "drain"
			drained = append(drained, f.Node)
		}
		if f.AgentErr != nil {
			fmt.Fprintf(tw, "%s\t(agent unreachable)\t-\t-\t-\t%s\n", f.Node, decision)
			continue
		}
		if len(f.Workloads) == 0 {
			fmt.Fprintf(tw, "%s\t(no pod a drain would move)\t-\t-\t-\t%s\n", f.Node, decision)
			continue
		}
		for i, wf := range f.Workloads {
			node, auto := f.Node, decision
			if i > 0 {
				node, auto = "", ""
			}
			age := "-"
			switch {
			case wf.P99Beyond:
				age = "> " + wf.P99Age.String()
			case wf.P99Age > 0:
				age = "≤ " + wf.P99Age.String()
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", node, wf.Workload, wf.Pods, wf.Outlive, age, auto)
			if wf.P99Age > deadline || (wf.P99Beyond && wf.P99Age >= deadline) {
				if wf.P99Age > long[wf.Workload] {
					long[wf.Workload] = wf.P99Age
				}
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, f := range fs {
		if f.AgentErr != nil || (f.Drain && !strings.HasPrefix(f.Reason, "drain: connections")) {
			fmt.Fprintf(w, "  %s: %s\n", f.Node, f.Reason)
		}
	}
	fmt.Fprintf(w, "\nFleet: drain auto would drain %d of %d node(s)", len(drained), len(fs))
	if len(drained) > 0 {
		fmt.Fprintf(w, " (%s)", named(drained))
	}
	fmt.Fprintln(w, ".")
	if len(long) == 0 {
		_, err := fmt.Fprintf(w, "No workload's p99 connection age exceeds the %s deadline.\n", deadline)
		return err
	}
	names := make([]string, 0, len(long))
	for n := range long {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(w, "Workloads whose connections outlive the %s deadline (p99 age): ", deadline)
	for i, n := range names {
		if i > 0 {
			fmt.Fprint(w, ", ")
		}
		fmt.Fprintf(w, "%s (%s)", n, long[n])
	}
	_, err := fmt.Fprintf(w, ".\nRecommendation: give them a maximum connection duration below %s (reconnect before the deadline), or raise ztunnel's terminationGracePeriodSeconds (chart value) so the deadline outlives them; otherwise each swap in place resets them, and drain auto drains their nodes.\n", deadline)
	return err
}
