package worker

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/orchestrator/gate"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/metrics"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/observe"
	"github.com/nodewise/nodewise/orchestrator/swap"
	"github.com/nodewise/nodewise/orchestrator/write"
)

func indexer() cache.Indexer {
	return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}

// caches are the informer stores a test worker reads.
type caches struct{ nodes, pods, dss, revs cache.Indexer }

func newCaches() caches { return caches{indexer(), indexer(), indexer(), indexer()} }

// world is a Fleet whose snapshot a test gives, recording the status it
// was asked with, and a Skew whose check a test gives.
type world struct {
	mu       sync.Mutex
	snapshot func(nr *v1alpha1.NodeRollout) model.Snapshot
	asked    []v1alpha1.NodeRolloutStatus
	skew     error
	checks   int // Check calls
}

func (w *world) Snapshot(nr *v1alpha1.NodeRollout, _ model.Policy) (model.Snapshot, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.asked = append(w.asked, *nr.Status.DeepCopy())
	if w.snapshot == nil {
		return model.Snapshot{Status: nr.Status}, nil
	}
	return w.snapshot(nr), nil
}

func (w *world) Check(context.Context, model.Policy, string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.checks++
	return w.skew
}

func (w *world) skewChecks() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.checks
}

// testWorker is a Worker over c, judged by g, for nr: its status writer
// has read nr once from an in-memory API (as a leader's first write does),
// the rollout cache holds nr, and no request leaves the process.
func testWorker(t *testing.T, c caches, g gate.Gate, nr *v1alpha1.NodeRollout, now func() time.Time) *Worker {
	t.Helper()
	status := write.NewStatus(context.Background(), fixture.NewRollouts(nr), zap.NewNop())
	if err := status.Mutate(context.Background(), nr.Name, func(*v1alpha1.NodeRolloutStatus) {}); err != nil {
		t.Fatal(err)
	}
	m, err := metrics.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	_ = store.Add(nr.DeepCopy())
	pods := observe.PodCache{PodLister: corelisters.NewPodLister(c.pods)}
	nodes := corelisters.NewNodeLister(c.nodes)
	targets := observe.Targets{DaemonSets: appslisters.NewDaemonSetLister(c.dss), Revisions: appslisters.NewControllerRevisionLister(c.revs), Pods: pods}
	changes := &observe.Changes{}
	w := &world{}
	return &Worker{
		Log: zap.NewNop(), Metrics: m, Now: now, Gate: g, Recorder: record.NewFakeRecorder(100),
		Nodes: nodes, Pods: pods, DaemonSets: targets.DaemonSets, Targets: targets, Rollouts: store,
		Claims: &observe.Claims{}, NodeWrites: &write.Nodes{Cache: nodes, Changes: changes, Now: now, Log: zap.NewNop()},
		Status: status, Waits: swap.Waits{Targets: targets, Changes: changes, Now: now},
		Skew: w, Fleet: w, Freed: func(string) {}, WG: &sync.WaitGroup{},
	}
}

// The fakes below stand in for the rooms a Worker acts through (doc.go),
// so a node can be driven through its steps with no API server: each
// records what it was asked, and a test injects the errors it needs.

// t0 is when every test clock starts.
var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// nodeWrites is a NodeWriter over in-memory nodes: a write applies its
// annotation patch (and the cordon or uncordon) and is logged as "op step"
// (op patch, cordon or uncordon; step the record's step once written).
// fail, when set, is asked before every write and fails it, unapplied.
type nodeWrites struct {
	mu      sync.Mutex
	nodes   map[string]*corev1.Node
	log     []string
	records []nodestep.Record // the record after each applied write
	fail    func(op string, step v1alpha1.NodeState) error
}

func (f *nodeWrites) write(op, node string, patch func(live nodestep.Record, n *corev1.Node) (map[string]*string, *bool)) (nodestep.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.nodes[node]
	if !ok {
		return nodestep.Record{}, apierrors.NewNotFound(corev1.Resource("nodes"), node)
	}
	ann, unschedulable := patch(nodestep.ParseRecord(n.Annotations), n)
	var step v1alpha1.NodeState
	if v := ann[model.AnnotationStep]; v != nil {
		step = v1alpha1.NodeState(*v)
	}
	if f.fail != nil {
		if err := f.fail(op, step); err != nil {
			return nodestep.Record{}, err
		}
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	for k, v := range ann {
		if v == nil {
			delete(n.Annotations, k)
		} else {
			n.Annotations[k] = *v
		}
	}
	if unschedulable != nil {
		n.Spec.Unschedulable = *unschedulable
	}
	rec := nodestep.ParseRecord(n.Annotations)
	f.log = append(f.log, op+" "+string(rec.Step))
	f.records = append(f.records, rec)
	return rec, nil
}

// Record writes a step record as write.Nodes does: only over the record the
// step was decided from (else nodestep.ErrRecordMoved, unapplied).
func (f *nodeWrites) Record(_ context.Context, uid types.UID, node string, prev nodestep.Record, ann map[string]*string) (nodestep.Record, error) {
	f.mu.Lock()
	n, ok := f.nodes[node]
	moved := ok && !nodestep.ParseRecord(n.Annotations).ForRollout(uid).Same(prev)
	f.mu.Unlock()
	if moved {
		return nodestep.Record{}, fmt.Errorf("node %s: %w", node, nodestep.ErrRecordMoved)
	}
	return f.write("patch", node, func(nodestep.Record, *corev1.Node) (map[string]*string, *bool) { return ann, nil })
}

// Cordon cordons as write.Nodes does: the prior cordon recorded once, the
// node's record in the same patch.
func (f *nodeWrites) Cordon(_ context.Context, rollout, node string, _ nodestep.Record, with map[string]*string) (nodestep.Record, error) {
	return f.write("cordon", node, func(live nodestep.Record, n *corev1.Node) (map[string]*string, *bool) {
		next, set := live.Cordoned(rollout, n.Spec.Unschedulable)
		ann := next.Patch(live)
		maps.Copy(ann, with)
		if set {
			return ann, nodestep.Ptr(true)
		}
		return ann, nil
	})
}

// Uncordon hands the node back as write.Nodes does: schedulable again only
// when nodewise cordoned it.
func (f *nodeWrites) Uncordon(_ context.Context, node string, _ nodestep.Record, with map[string]*string) (nodestep.Record, error) {
	return f.write("uncordon", node, func(live nodestep.Record, _ *corev1.Node) (map[string]*string, *bool) {
		next, clear := live.Uncordoned()
		ann := next.Patch(live)
		maps.Copy(ann, with)
		if clear {
			return ann, nodestep.Ptr(false)
		}
		return ann, nil
	})
}

func (f *nodeWrites) Newest(node string) *corev1.Node {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n, ok := f.nodes[node]; ok {
		return n.DeepCopy()
	}
	return nil
}

// node is the node as last written.
func (f *nodeWrites) node(name string) *corev1.Node { return f.Newest(name) }

// steps is the log of applied writes.
func (f *nodeWrites) steps() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.log)
}

// recordOf is the record written with step st (the last such write).
func (f *nodeWrites) recordOf(t *testing.T, st v1alpha1.NodeState) nodestep.Record {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.records) - 1; i >= 0; i-- {
		if f.records[i].Step == st {
			return f.records[i]
		}
	}
	t.Fatalf("no record of step %s was written (writes: %v)", st, f.log)
	return nodestep.Record{}
}

// statusWrites is a StatusWriter over one in-memory status. Every
// mutation applies at once; waited counts those written before the caller
// went on (Mutate), behind those queued (MutateLater). fail, when set, is
// asked with the node entry a waited write would leave, and fails it,
// unapplied. states logs each state node entries took, in order.
type statusWrites struct {
	mu      sync.Mutex
	st      v1alpha1.NodeRolloutStatus
	waited  int
	behind  int
	states  []string // "node state"
	fail    func(after v1alpha1.NodeRolloutStatus) error
	unknown bool // Current knows nothing (this process has not written)
}

func (s *statusWrites) apply(f func(*v1alpha1.NodeRolloutStatus), check bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := *s.st.DeepCopy()
	f(&next)
	if check && s.fail != nil {
		if err := s.fail(next); err != nil {
			return err
		}
	}
	for _, ns := range next.Nodes {
		if was := s.entry(ns.Name); was == nil || was.State != ns.State {
			s.states = append(s.states, ns.Name+" "+string(ns.State))
		}
	}
	s.st = next
	return nil
}

func (s *statusWrites) entry(node string) *v1alpha1.NodeStatus {
	for i := range s.st.Nodes {
		if s.st.Nodes[i].Name == node {
			return &s.st.Nodes[i]
		}
	}
	return nil
}

func (s *statusWrites) Mutate(_ context.Context, _ string, f func(*v1alpha1.NodeRolloutStatus)) error {
	if err := s.apply(f, true); err != nil {
		return err
	}
	s.mu.Lock()
	s.waited++
	s.mu.Unlock()
	return nil
}

func (s *statusWrites) MutateLater(_ string, f func(*v1alpha1.NodeRolloutStatus)) {
	_ = s.apply(f, false)
	s.mu.Lock()
	s.behind++
	s.mu.Unlock()
}

func (s *statusWrites) Current(string, types.UID) (v1alpha1.NodeRolloutStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unknown {
		return v1alpha1.NodeRolloutStatus{}, false // as write.Status: nothing before this process's first write
	}
	return *s.st.DeepCopy(), true
}

// status is the whole status as written.
func (s *statusWrites) status() v1alpha1.NodeRolloutStatus {
	st, _ := s.Current("", "")
	return st
}

// node is the node's entry as written (a zero entry when there is none).
func (s *statusWrites) node(name string) v1alpha1.NodeStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ns := s.entry(name); ns != nil {
		return *ns.DeepCopy()
	}
	return v1alpha1.NodeStatus{}
}

// drainer is a Drainer that drains nothing: it counts its calls, runs
// during (a user's edit while the node drains) and returns err.
type drainer struct {
	mu     sync.Mutex
	calls  int
	during func()
	err    error
}

func (d *drainer) Drain(_ context.Context, _ *v1alpha1.NodeRollout, _ model.Policy, _ string, rec nodestep.Record, _ time.Time) (nodestep.Record, bool, error) {
	d.mu.Lock()
	d.calls++
	d.mu.Unlock()
	if d.during != nil {
		d.during()
	}
	return rec, d.err == nil, d.err
}

func (d *drainer) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls
}

// swapper is a Swapper that swaps in the pod cache: it replaces the
// target's old pod on the node with a Ready one on the newest revision
// (what the DaemonSet controller and the kubelet would do), unless err is
// set (returned instead), stay is set (nothing happens: the new pod never
// comes) or hold is set (it waits for its context, as a swap waiting for
// Ready does). during runs first.
type swapper struct {
	c       caches
	mu      sync.Mutex
	swapped []string
	during  func()
	err     error
	stay    bool
	hold    bool
}

func (s *swapper) Swap(ctx context.Context, ref v1alpha1.TargetRef, node string, _ time.Time, _ time.Duration) error {
	s.mu.Lock()
	s.swapped = append(s.swapped, ref.Name)
	s.mu.Unlock()
	if s.during != nil {
		s.during()
	}
	switch {
	case s.err != nil:
		return s.err
	case s.hold:
		<-ctx.Done()
		return ctx.Err()
	case !s.stay:
		upgrade(s.c, ref, node)
	}
	return nil
}

func (s *swapper) calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.swapped)
}

// judgeGate prepares, keeps a record, judges and releases as the judge
// does, with the verdict (or error) a test gives, recording every input.
// progress reports an Inconclusive round through GateInput.Progress before
// the verdict; judge, when set, replaces the verdict.
type judgeGate struct {
	gate.Base
	mu         sync.Mutex
	verdict    health.Verdict
	err        error
	prepareErr error
	keepErr    error
	progress   bool
	judge      func(ctx context.Context, round int, in gate.GateInput) (health.Verdict, error)
	prepared   []gate.PrepareInput
	kept       []gate.KeepInput
	judged     []gate.GateInput
	released   []string
}

func passing() *judgeGate {
	return &judgeGate{verdict: health.Verdict{Outcome: health.Pass, Reasons: []string{"no regression"}, Summary: &v1alpha1.NodeJudgement{Judgements: 3}}}
}

func (g *judgeGate) Reads() gate.Reads { return gate.Reads{Samples: true} }

func (g *judgeGate) Prepare(_ context.Context, in gate.PrepareInput) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.prepared = append(g.prepared, in)
	return g.prepareErr
}

func (g *judgeGate) Keep(_ context.Context, in gate.KeepInput) (gate.Kept, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.kept = append(g.kept, in)
	if g.keepErr != nil {
		return gate.Kept{}, g.keepErr
	}
	return gate.Kept{Baseline: fmt.Sprintf("kept %d", len(g.kept)), Controls: fmt.Sprintf("controls %d", len(g.kept))}, nil
}

func (g *judgeGate) Judge(ctx context.Context, in gate.GateInput) (health.Verdict, error) {
	g.mu.Lock()
	g.judged = append(g.judged, in)
	round := len(g.judged)
	g.mu.Unlock()
	if g.progress {
		if err := in.Progress(ctx, health.Verdict{Outcome: health.Inconclusive, Reasons: []string{"too little traffic"}}); err != nil {
			return health.Verdict{}, err
		}
	}
	if g.judge != nil {
		return g.judge(ctx, round, in)
	}
	return g.verdict, g.err
}

func (g *judgeGate) Done(node string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.released = append(g.released, node)
}

func (g *judgeGate) inputs() []gate.GateInput {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.judged)
}

// The rollout, node and targets a rig drives.
const (
	rollout  = "r"
	node1    = "n1"
	oldHash  = "old"
	newHash  = "new"
	ztGrace  = 45 // seconds: the ztunnel DaemonSet's terminationGracePeriodSeconds
	longTime = 5 * time.Minute
)

// rig is a Worker whose rooms are all fakes, driving node n1 of rollout r
// over the default targets (istio-cni-node replaced, ztunnel surged), each
// with its old pod on n1.
type rig struct {
	*Worker
	c       caches
	nodes   *nodeWrites
	status  *statusWrites
	drain   *drainer
	replace *swapper
	surge   *swapper
	world   *world
	events  *record.FakeRecorder
	nr      *v1alpha1.NodeRollout
	p       model.Policy
}

// newRig is a rig judged by g on clk, for a rollout whose spec drains
// always, with a baseline, a soak and timeouts of five minutes, changed by
// mut.
func newRig(t *testing.T, g gate.Gate, clk *fixture.Clock, mut func(*v1alpha1.NodeRolloutSpec)) *rig {
	t.Helper()
	d := func() *v1alpha1.Duration { return v1alpha1.DurationOf(longTime) }
	nr := &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: rollout, UID: "r-uid"},
		Spec: v1alpha1.NodeRolloutSpec{Baseline: d(), Soak: d(), SwapTimeout: d(),
			Drain: v1alpha1.DrainSpec{Policy: v1alpha1.DrainAlways, Timeout: d()}}}
	if mut != nil {
		mut(&nr.Spec)
	}
	p, err := model.NewPolicy(nr.Spec)
	if err != nil {
		t.Fatal(err)
	}
	c := newCaches()
	n := readyNode(node1)
	_ = c.nodes.Add(n)
	for _, ref := range p.Targets {
		addTarget(c, ref, node1)
	}
	m, err := metrics.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	_ = store.Add(nr.DeepCopy())
	pods := observe.PodCache{PodLister: corelisters.NewPodLister(c.pods)}
	nodes := corelisters.NewNodeLister(c.nodes)
	targets := observe.Targets{DaemonSets: appslisters.NewDaemonSetLister(c.dss), Revisions: appslisters.NewControllerRevisionLister(c.revs), Pods: pods}
	r := &rig{
		c:       c,
		nodes:   &nodeWrites{nodes: map[string]*corev1.Node{node1: n.DeepCopy()}},
		status:  &statusWrites{},
		drain:   &drainer{},
		replace: &swapper{c: c},
		surge:   &swapper{c: c},
		world:   &world{},
		events:  record.NewFakeRecorder(100),
		nr:      nr,
		p:       p,
	}
	r.Worker = &Worker{
		Log: zap.NewNop(), Metrics: m, Now: clk.Now, Gate: g, Recorder: r.events,
		Nodes: nodes, Pods: pods, DaemonSets: targets.DaemonSets, Targets: targets, Rollouts: store,
		Claims: &observe.Claims{}, NodeWrites: r.nodes, Status: r.status,
		Waits:   swap.Waits{Targets: targets, Changes: &observe.Changes{}, Now: clk.Now},
		Swaps:   map[model.SwapKind]swap.Swapper{model.SwapReplace: r.replace, model.SwapSurge: r.surge},
		Drainer: r.drain, Skew: r.world, Fleet: r.world, Freed: func(string) {}, WG: &sync.WaitGroup{},
	}
	return r
}

// oldPod is the old pod the rig's records name before a swap.
func (r *rig) oldPod(ref v1alpha1.TargetRef, node string) types.UID {
	return r.records().oldPod(ref, node)
}

// edit changes the live NodeRollout in the rollout cache (a user's edit).
func (r *rig) edit(f func(*v1alpha1.NodeRollout)) {
	live := r.latest(r.nr.Name).DeepCopy()
	f(live)
	_ = r.Rollouts.Update(live)
}

// resumeAt gives n1 this rollout's record at step st, written at since, as
// a predecessor left it.
func (r *rig) resumeAt(st v1alpha1.NodeState, since time.Time, mut func(*nodestep.Record)) {
	rec := nodestep.Record{}.WithStep(r.nr.Name, r.nr.UID, st, since)
	rec.SwapSince = since
	if mut != nil {
		mut(&rec)
	}
	n := r.nodes.nodes[node1]
	n.Annotations = map[string]string{}
	for k, v := range rec.Patch(nodestep.Record{}) {
		n.Annotations[k] = *v
	}
}

// drive drives n1 from its record to its end, as runNode does.
func (r *rig) drive(ctx context.Context) error { return r.driveNode(ctx, r.nr, r.p, node1) }

// recorded is every event the worker recorded so far.
func (r *rig) recorded() []string {
	var out []string
	for {
		select {
		case e := <-r.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// halts is the count of halts with this label.
func (r *rig) halts(label string) float64 {
	return testutil.ToFloat64(r.Metrics.Halts.WithLabelValues(label))
}

// readyNode is a node Ready since long before any test's clock.
func readyNode(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name + "-uid"), Labels: map[string]string{"pool": "a"}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			LastTransitionTime: metav1.NewTime(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC))}}}}
}

// addTarget puts the target's DaemonSet (settled, its newest revision
// newHash) in the caches, with its pod on node on oldHash.
func addTarget(c caches, ref v1alpha1.TargetRef, node string) {
	uid := types.UID(ref.Name + "-uid")
	grace := int64(ztGrace)
	_ = c.dss.Add(&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name, UID: uid, Generation: 2},
		Spec:   appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{TerminationGracePeriodSeconds: &grace}}},
		Status: appsv1.DaemonSetStatus{ObservedGeneration: 2}})
	_ = c.revs.Add(&appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name + "-" + newHash,
		Labels: map[string]string{model.LabelControllerRevisionHash: newHash}, OwnerReferences: []metav1.OwnerReference{{UID: uid}}}, Revision: 2})
	_ = c.pods.Add(targetPod(ref, node, oldHash))
}

// targetPod is the target's Ready pod on node at hash.
func targetPod(ref v1alpha1.TargetRef, node, hash string) *corev1.Pod {
	name := ref.Name + "-" + hash
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: name, UID: types.UID(name + "-uid"),
		Labels: map[string]string{model.LabelControllerRevisionHash: hash}, OwnerReferences: []metav1.OwnerReference{{Kind: "DaemonSet", UID: types.UID(ref.Name + "-uid")}}},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
}

// upgrade swaps the target's old pod on node for a Ready one on newHash.
func upgrade(c caches, ref v1alpha1.TargetRef, node string) {
	_ = c.pods.Delete(targetPod(ref, node, oldHash))
	_ = c.pods.Add(targetPod(ref, node, newHash))
}
