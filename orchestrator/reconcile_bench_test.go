package orchestrator

import (
	"fmt"
	"runtime"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/planner"
)

// BenchmarkReconcilePerNodeChange is the cost of the reconcile pass one
// node's change starts, at 1,000 and 5,000 nodes, for the pass an event
// starts now (mode=event: the changed node's view rebuilt, the plan skipped
// when the node cannot change it, views.go) beside the full pass every
// event started before (mode=full: every node observed and planned, the
// plan merged into status), measured in the same run on the same fleet.
//
// The fleet is mid-rollout as make bench-scale rolls it: 5 zones,
// maxParallel = maxUnavailable = 50, the ramp waves and 20 more nodes Done,
// 50 nodes in flight (their workers counted as running), the rest Pending.
// The caches are the executor's informer stores fed directly (in process:
// no API server; the requests are the ones the pass makes through its
// clients, a fake clientset and the in-memory NodeRollout API, with the
// status writes it queued flushed after each change). The changes:
//   - inflight-pod-ready: an in-flight node's ztunnel pod turns Ready or
//     not (the bulk of a rollout's events: every swap makes several);
//   - heartbeat: a pending node's status is rewritten with a new heartbeat
//     (nothing the planner reads changes);
//   - pending-notready: a pending node goes NotReady or Ready again (the
//     plan changes: the node waits, its status entry says why).
//
// It prints one line per fleet size, change and mode:
//
//	reconcile nodes=N change=C mode=M cpu_us_per_change=… wall_us_per_change=… allocs_per_change=… requests_per_change=… nodes_touched=…
//
// and the ratio of the 5,000-node figures to the 1,000-node ones. It fails
// when a change that moves the plan costs more than 1.5 × the CPU at 5,000
// nodes than at 1,000 (issue #47's bar), in the same run.
func BenchmarkReconcilePerNodeChange(b *testing.B) {
	sizes := []int{1000, 5000}
	changes := []string{"inflight-pod-ready", "heartbeat", "pending-notready"}
	modes := []string{"event", "full"}
	type key struct {
		nodes        int
		change, mode string
	}
	got := map[key]passCost{}
	for b.Loop() {
		for _, n := range sizes {
			f := newBenchFleet(b, n)
			for _, ch := range changes {
				for _, mode := range modes {
					got[key{n, ch, mode}] = f.measure(b, ch, mode)
				}
			}
		}
	}
	var lines []string
	for k, c := range got {
		lines = append(lines, fmt.Sprintf("reconcile nodes=%d change=%s mode=%s cpu_us_per_change=%.1f wall_us_per_change=%.1f allocs_per_change=%.0f requests_per_change=%.2f nodes_touched=%.1f",
			k.nodes, k.change, k.mode, c.cpuUS, c.wallUS, c.allocs, c.requests, c.nodes))
	}
	sort.Strings(lines)
	for _, l := range lines {
		b.Log(l)
		fmt.Println(l)
	}
	for _, ch := range changes {
		for _, mode := range modes {
			lo, hi := got[key{sizes[0], ch, mode}], got[key{sizes[1], ch, mode}]
			l := fmt.Sprintf("reconcile ratio=%d/%d change=%s mode=%s cpu=%.2f wall=%.2f allocs=%.2f nodes_touched=%.2f requests=%.2f/%.2f",
				sizes[1], sizes[0], ch, mode, ratio(hi.cpuUS, lo.cpuUS), ratio(hi.wallUS, lo.wallUS), ratio(hi.allocs, lo.allocs), ratio(hi.nodes, lo.nodes), hi.requests, lo.requests)
			b.Log(l)
			fmt.Println(l)
		}
	}
	if lo, hi := got[key{sizes[0], "pending-notready", "event"}], got[key{sizes[1], "pending-notready", "event"}]; ratio(hi.cpuUS, lo.cpuUS) > 1.5 {
		b.Errorf("a plan-moving change's pass costs %.0f µs of CPU at %d nodes, %.0f µs at %d: ×%.2f, more than 1.5", hi.cpuUS, sizes[1], lo.cpuUS, sizes[0], ratio(hi.cpuUS, lo.cpuUS))
	}
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// passCost is one kind of change's cost, averaged over its changes.
type passCost struct{ cpuUS, wallUS, allocs, requests, nodes float64 }

// benchFleet is an executor over a fleet of n nodes mid-rollout.
type benchFleet struct {
	*env
	inflight, pending []string
	nr                *v1alpha1.NodeRollout
}

func newBenchFleet(b testing.TB, n int) *benchFleet {
	b.Helper()
	nr := rollout("fleet", func(nr *v1alpha1.NodeRollout) {
		nr.Spec.MaxParallel, nr.Spec.MaxUnavailable = intstr.FromInt32(50), intstr.FromInt32(50)
	})
	var views []model.NodeView
	for i := range n {
		zone := fmt.Sprintf("zone-%c", 'a'+i%5)
		views = append(views, model.NodeView{Name: fmt.Sprintf("node-%05d", i), Zone: zone})
	}
	order, _ := planner.Order(views, nil, 50)
	done := 20 // and the ramp waves 1, 2, 4 … 32 of the first zone
	for _, pn := range order {
		if pn.Wave < 7 {
			done++
		}
	}
	objs := []k8sruntime.Object{cniDS.DeepCopy(), ztunnelDS.DeepCopy(), nr}
	objs = append(objs, revisions(cniDS)...)
	objs = append(objs, revisions(ztunnelDS)...)
	f := &benchFleet{nr: nr}
	for i, pn := range order {
		node := testNode(pn.Name)
		node.Labels[model.LabelZone] = pn.Zone
		cni, zt := fixture.OldHash, fixture.OldHash
		switch {
		case i < done:
			node.Annotations = recordOf(nr, v1alpha1.NodeDone)
			cni, zt = fixture.NewHash, fixture.NewHash
		case i < done+50:
			node.Annotations = recordOf(nr, v1alpha1.NodeSwapZtunnel)
			node.Spec.Unschedulable = true
			cni = fixture.NewHash
			f.inflight = append(f.inflight, pn.Name)
		default:
			f.pending = append(f.pending, pn.Name)
		}
		objs = append(objs, node, targetPod(cniDS, pn.Name, cni), targetPod(ztunnelDS, pn.Name, zt))
	}
	f.env = newEnv(b, objs...)
	for _, node := range f.inflight {
		f.ex.claims.StartWorker(nr.Name, node) // their workers run: a pass only resumes them
	}
	f.ex.reconcileAll(f.ctx) // the first pass writes the plan into status and takes the finalizer
	f.flush()
	if err := f.store.Update(f.api.Stored(nr.Name)); err != nil { // as the informer would
		b.Fatal(err)
	}
	f.ex.reconcileAll(f.ctx)
	p, err := model.NewPolicy(nr.Spec)
	if err != nil {
		b.Fatal(err)
	}
	snap, err := f.ex.observer.Snapshot(f.stored(nr.Name), p)
	if err != nil {
		b.Fatal(err)
	}
	by := map[bool]int{}
	for _, v := range snap.Nodes {
		by[model.InFlight(v.State)]++
	}
	if by[true] != 50 || len(f.views(nr.Name)) != n {
		b.Fatalf("%d nodes in flight, %d views kept: want 50 and %d", by[true], len(f.views(nr.Name)), n)
	}
	return f
}

// views are the node views kept from the last full pass.
func (f *benchFleet) views(rollout string) []model.NodeView {
	if fv := f.ex.views[rollout]; fv != nil && fv.Roster != nil {
		return fv.Roster.Nodes()
	}
	return nil
}

// flush waits for the status writes the passes queued behind.
func (f *benchFleet) flush() {
	if err := f.ex.status.Mutate(f.ctx, f.nr.Name, func(*v1alpha1.NodeRolloutStatus) {}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *benchFleet) requests() int { return len(f.kube.Actions()) + len(f.api.Calls) }

// change makes the i-th change of kind ch in the caches and marks it as
// the informers' handlers do.
func (f *benchFleet) change(ch string, i int) {
	switch ch {
	case "inflight-pod-ready":
		node := f.inflight[i%len(f.inflight)]
		obj, _, _ := f.pods.GetByKey(istioNS + "/" + ztunnelDS.Name + "-" + node)
		old := obj.(*corev1.Pod)
		pod := old.DeepCopy()
		st := pod.Status.Conditions[0].Status
		pod.Status.Conditions[0].Status = map[corev1.ConditionStatus]corev1.ConditionStatus{corev1.ConditionTrue: corev1.ConditionFalse, corev1.ConditionFalse: corev1.ConditionTrue}[st]
		_ = f.pods.Update(pod)
		f.ex.podEvent(old, pod)
	case "heartbeat", "pending-notready":
		node := f.pending[(i*7)%len(f.pending)]
		obj, _, _ := f.nodes.GetByKey(node)
		n := obj.(*corev1.Node).DeepCopy()
		c := &n.Status.Conditions[0]
		c.LastHeartbeatTime = metav1.NewTime(t0.Add(time.Duration(i) * time.Second))
		if ch == "pending-notready" {
			c.Status = map[corev1.ConditionStatus]corev1.ConditionStatus{corev1.ConditionTrue: corev1.ConditionFalse, corev1.ConditionFalse: corev1.ConditionTrue}[c.Status]
			c.LastTransitionTime = c.LastHeartbeatTime
		}
		_ = f.nodes.Update(n)
		f.ex.nodeEvent(nil, n)
	}
}

// measure makes changes of kind ch, each followed by the pass mode starts,
// and returns the cost per change: the pass's CPU (the process's, rusage,
// from a collected heap: the collection of an earlier pass's garbage is
// not this one's) and wall time, its heap allocations, its requests (with
// the status writes it queued behind, flushed after it) and the node views
// it built.
func (f *benchFleet) measure(b *testing.B, ch, mode string) passCost {
	const changes = 40
	var ms runtime.MemStats
	var cpu, wall time.Duration
	var allocs uint64
	reqs, views := f.requests(), testutil.ToFloat64(f.ex.metrics.NodeViews)
	for i := range changes {
		f.change(ch, i)
		runtime.GC()
		runtime.ReadMemStats(&ms)
		m0, c0, w0 := ms.Mallocs, rusage(b), time.Now()
		if mode == "full" {
			f.ex.reconcileAll(f.ctx)
		} else {
			f.ex.reconcileChanged(f.ctx)
		}
		wall += time.Since(w0)
		cpu += rusage(b) - c0
		runtime.ReadMemStats(&ms)
		allocs += ms.Mallocs - m0
		f.flush()
	}
	return passCost{
		cpuUS:    float64(cpu.Microseconds()) / changes,
		wallUS:   float64(wall.Microseconds()) / changes,
		allocs:   float64(allocs) / changes,
		requests: float64(f.requests()-reqs) / changes,
		nodes:    (testutil.ToFloat64(f.ex.metrics.NodeViews) - views) / changes,
	}
}

// rusage is the process's CPU time so far (user and system).
func rusage(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
