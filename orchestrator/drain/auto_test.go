package drain

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/observe"
)

// agent is a node agent answering snapshot (or err), recording the nodes it
// was asked about.
type agent struct {
	mu       sync.Mutex
	asked    []string
	snapshot wire.Snapshot
	err      error
	// answer, when set, answers instead.
	answer func(ctx context.Context) (wire.Snapshot, error)
}

func (a *agent) Snapshot(ctx context.Context, n string) (wire.Snapshot, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, n)
	if a.answer != nil {
		return a.answer(ctx)
	}
	return a.snapshot, a.err
}

func (a *agent) nodes() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.asked...)
}

// agentSnapshot is an eBPF agent's snapshot at now, started before every
// test pod, seeing the pods of old: by pod name, how many connections
// (older than any threshold) each holds.
func agentSnapshot(old map[string]uint64) wire.Snapshot {
	s := wire.Snapshot{Node: node, Time: now, Mode: wire.ModeEBPF, StartTime: fixture.SurgeT0.Add(-time.Hour)}
	for name, n := range old {
		ages := make([]uint64, len(wire.AgeBucketBoundsSeconds)+1)
		ages[len(ages)-1] = n
		s.Pods = append(s.Pods, wire.PodCounters{Namespace: "default", Name: name, UID: name + "-uid", ConnAges: ages})
	}
	return s
}

func autoPolicy(t *testing.T, mut func(*v1alpha1.NodeRolloutSpec)) model.Policy {
	t.Helper()
	return fixture.Policy(t, func(s *v1alpha1.NodeRolloutSpec) {
		s.Drain.Policy = v1alpha1.DrainAuto
		if mut != nil {
			mut(s)
		}
	})
}

var nodePatches = func(a k8stesting.Action) bool { return a.GetVerb() == "patch" && a.GetResource().Resource == "nodes" }

// countActions counts the fake clientset's actions that match.
func countActions(h *harness, match func(k8stesting.Action) bool) int {
	n := 0
	for _, a := range h.kube.Actions() {
		if match(a) {
			n++
		}
	}
	return n
}

// TestAutoDecidesAndPersists: under drain policy auto, Drain asks the node
// agent (only when it must), decides, and persists the choice before acting
// on it: the node's record (decision and time, as the API returns it), the
// reason in the node's status entry and an Event on the NodeRollout and on
// the Node (with its UID). Only a "drain" decision evicts.
func TestAutoDecidesAndPersists(t *testing.T) {
	tests := []struct {
		name       string
		pods       []*corev1.Pod
		agent      *agent // nil: no agent configured
		mut        func(*v1alpha1.NodeRolloutSpec)
		wantDrain  bool
		wantAsked  bool
		wantReason string
	}{
		{
			name:       "no agent configured: drain (fail safe)",
			wantDrain:  true,
			wantReason: "drain (fail safe): the node agent cannot tell connection ages: no node agent configured",
		},
		{
			name:       "the agent does not answer: drain (fail safe)",
			agent:      &agent{err: errors.New("connection refused")},
			wantDrain:  true,
			wantAsked:  true,
			wantReason: "drain (fail safe): the node agent cannot tell connection ages: connection refused",
		},
		{
			name:       "the agent sees a long-lived connection: drain",
			agent:      &agent{snapshot: agentSnapshot(map[string]uint64{"web-1": 0, "web-2": 2, "orchestrator-0": 0})},
			wantDrain:  true,
			wantAsked:  true,
			wantReason: "drain: connections open longer than 5s (ztunnel's drain deadline 25s cuts what is still open) on default/web-2 (2)",
		},
		{
			name:       "the agent vouches for every pod: in place",
			agent:      &agent{snapshot: agentSnapshot(map[string]uint64{"web-1": 0, "web-2": 0, "orchestrator-0": 0})},
			wantAsked:  true,
			wantReason: "in place: no connection open longer than 5s (ztunnel's drain deadline 25s cuts what is still open) among ",
		},
		{
			name:       "nothing a drain would move: in place without asking",
			pods:       []*corev1.Pod{ztunnelPod("ztunnel-n1", nil), mirrorPod(), appPod("web-other", "n2")},
			agent:      &agent{err: errors.New("must not be asked")},
			wantReason: "in place: no pod on the node that a drain would move",
		},
		{
			name:       "ztunnel is not a target: in place without asking",
			agent:      &agent{err: errors.New("must not be asked")},
			mut:        func(s *v1alpha1.NodeRolloutSpec) { s.Targets = model.DefaultTargets[:1] },
			wantReason: "in place: ztunnel is not a target",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pods := tt.pods
			if pods == nil {
				pods = standardPods()
			}
			h := newHarness(t, drainRecord(), pods...)
			if tt.agent != nil {
				h.d.Agents = tt.agent
			}
			// A person asked to keep the node cordoned since the worker
			// read its record: the record returned must be the API's.
			n, err := h.kube.CoreV1().Nodes().Get(t.Context(), node, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			n.Annotations[model.AnnotationKeepCordoned] = "maintenance"
			if err := h.kube.Tracker().Update(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, n, ""); err != nil {
				t.Fatal(err)
			}
			h.kube.ClearActions()
			nr := testRollout()
			got, drained, err := h.d.Drain(t.Context(), nr, autoPolicy(t, tt.mut), node, drainRecord(), now.Add(time.Minute))
			if err != nil || drained != tt.wantDrain {
				t.Fatalf("Drain = drained %v, %v; want %v, nil", drained, err, tt.wantDrain)
			}
			decision := nodestep.DrainDecisionInPlace
			if tt.wantDrain {
				decision = nodestep.DrainDecisionDrain
			}
			// The record returned is the API's, and keeps the step.
			if got.DrainDecision != decision || !got.DrainDecidedAt.Equal(now) || got.Step != v1alpha1.NodeDrain || got.RolloutUID != nr.UID ||
				got.KeepCordoned == nil || *got.KeepCordoned != "maintenance" {
				t.Errorf("returned record %+v, want decision %q at %s at step Drain of %s, and the API's keep-cordoned", got, decision, now, nr.UID)
			}
			if stored := h.storedRecord(t); !reflect.DeepEqual(stored, got) {
				t.Errorf("stored record %+v, want the returned %+v", stored, got)
			}
			if r := h.status.reason(); !strings.HasPrefix(r, "drain auto: "+tt.wantReason) {
				t.Errorf("status reason %q, want it to start with %q", r, "drain auto: "+tt.wantReason)
			}
			if w := h.status.writes(); !reflect.DeepEqual(w, []string{"r"}) {
				t.Errorf("status writes %v, want one of r", w)
			}
			ev := h.events.all()
			if len(ev) != 2 {
				t.Fatalf("events %+v, want 2", ev)
			}
			if ev[0].obj != nr || ev[0].typ != corev1.EventTypeNormal || ev[0].reason != "DrainDecision" || !strings.HasPrefix(ev[0].message, "node n1: "+tt.wantReason) {
				t.Errorf("rollout event %+v", ev[0])
			}
			ref, ok := ev[1].obj.(*corev1.ObjectReference)
			if !ok || ref.Kind != "Node" || ref.Name != node || ref.UID != nodeUID || ev[1].reason != "NodewiseDrainDecision" || !strings.HasPrefix(ev[1].message, "NodeRollout r: "+tt.wantReason) {
				t.Errorf("node event %+v (object %+v)", ev[1], ev[1].obj)
			}
			if tt.agent != nil {
				if asked := tt.agent.nodes(); tt.wantAsked != reflect.DeepEqual(asked, []string{node}) {
					t.Errorf("agent asked about %v, want asked %v (about %s)", asked, tt.wantAsked, node)
				}
			}
			var want []string
			if tt.wantDrain {
				want = []string{"default/web-1", "default/web-2"}
			}
			if ev := h.evictions(); !reflect.DeepEqual(ev, want) {
				t.Errorf("evictions %q, want %q", ev, want)
			}
		})
	}
}

// TestAutoDeadlineFromZtunnel: the drain deadline auto decides with comes
// from the grace period of the ztunnel pods on the node (the shortest),
// else from the DaemonSet's template, else the default (30 s), and the
// threshold is capped by it.
func TestAutoDeadlineFromZtunnel(t *testing.T) {
	tests := []struct {
		name     string
		ztunnels []*corev1.Pod
		dsGrace  *int64 // the DaemonSet's template grace
		noDS     bool
		want     string
	}{
		{name: "the shortest grace of the node's ztunnel pods", ztunnels: []*corev1.Pod{ztunnelPod("zt-a", nodestep.Ptr[int64](60)), ztunnelPod("zt-b", nodestep.Ptr[int64](20))}, want: "15s"},
		{name: "a ztunnel pod without a grace: the default", ztunnels: []*corev1.Pod{ztunnelPod("zt-a", nil)}, want: "25s"},
		{name: "no ztunnel pod: the DaemonSet's template", dsGrace: nodestep.Ptr[int64](40), want: "35s"},
		{name: "no ztunnel pod nor DaemonSet: the default", noDS: true, want: "25s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pods := append([]*corev1.Pod{appPod("web-1", node)}, tt.ztunnels...)
			h := newHarness(t, drainRecord(), pods...)
			ds := fixture.SurgeDS.DeepCopy()
			ds.Spec.Template.Spec.TerminationGracePeriodSeconds = tt.dsGrace
			if err := h.dsIdx.Update(ds); err != nil {
				t.Fatal(err)
			}
			if tt.noDS {
				if err := h.dsIdx.Delete(ds); err != nil {
					t.Fatal(err)
				}
			}
			h.d.Agents = &agent{snapshot: agentSnapshot(map[string]uint64{"web-1": 0})}
			p := autoPolicy(t, func(s *v1alpha1.NodeRolloutSpec) { s.Drain.LongLivedAfter = &v1alpha1.Duration{Duration: time.Hour} })
			_, drained, err := h.d.Drain(t.Context(), testRollout(), p, node, drainRecord(), now.Add(time.Minute))
			if err != nil || drained {
				t.Fatalf("Drain = drained %v, %v; want false, nil", drained, err)
			}
			want := "open longer than " + tt.want + " (ztunnel's drain deadline " + tt.want + " cuts"
			if r := h.status.reason(); !strings.Contains(r, want) {
				t.Errorf("status reason %q does not contain %q", r, want)
			}
		})
	}
}

// TestAutoReadsBackItsDecision: a decision persisted in this attempt of the
// Drain step (at or after its start) is acted on without asking the agent
// or writing anything; an older one, from an earlier attempt, is made again.
func TestAutoReadsBackItsDecision(t *testing.T) {
	tests := []struct {
		name      string
		decision  string
		decidedAt time.Time
		wantDrain bool
		wantNew   bool // decided again (and persisted)
	}{
		{name: "in place, decided in this attempt", decision: nodestep.DrainDecisionInPlace, decidedAt: stepSince.Add(time.Second)},
		{name: "drain, decided in this attempt", decision: nodestep.DrainDecisionDrain, decidedAt: stepSince, wantDrain: true},
		{name: "in place, decided in an earlier attempt", decision: nodestep.DrainDecisionInPlace, decidedAt: stepSince.Add(-time.Minute), wantDrain: true, wantNew: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := drainRecord()
			rec.DrainDecision, rec.DrainDecidedAt = tt.decision, tt.decidedAt
			h := newHarness(t, rec, standardPods()...)
			a := &agent{err: errors.New("unreachable")}
			h.d.Agents = a
			got, drained, err := h.d.Drain(t.Context(), testRollout(), autoPolicy(t, nil), node, rec, now.Add(time.Minute))
			if err != nil || drained != tt.wantDrain {
				t.Fatalf("Drain = drained %v, %v; want %v, nil", drained, err, tt.wantDrain)
			}
			patches := countActions(h, nodePatches)
			if !tt.wantNew {
				if !reflect.DeepEqual(got, rec) || patches != 0 || len(a.nodes()) != 0 || len(h.status.writes()) != 0 || len(h.events.all()) != 0 {
					t.Errorf("record %+v, %d node patches, agent asked %v, status writes %v, events %v: want the record back and nothing asked or written",
						got, patches, a.nodes(), h.status.writes(), h.events.all())
				}
				return
			}
			if patches != 1 || got.DrainDecision != nodestep.DrainDecisionDrain || !got.DrainDecidedAt.Equal(now) {
				t.Errorf("%d node patches, record %+v: want the new decision persisted once", patches, got)
			}
			if stored := h.storedRecord(t); stored.DrainDecision != nodestep.DrainDecisionDrain || !stored.DrainDecidedAt.Equal(now) {
				t.Errorf("stored record %+v, want the new decision", stored)
			}
		})
	}
}

// TestAutoCannotPersist: when the decision cannot be persisted (the node
// patch or the status write fails), Drain returns the API's error, acts on
// nothing (no eviction, no Event) and returns the record it was given.
func TestAutoCannotPersist(t *testing.T) {
	tests := []struct {
		name  string
		setup func(h *harness)
		check func(error) bool
	}{
		{
			name: "node patch forbidden",
			setup: func(h *harness) {
				h.kube.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, node, errors.New("no patch permission"))
				})
			},
			check: apierrors.IsForbidden,
		},
		{
			name: "node gone (404)",
			setup: func(h *harness) {
				if err := h.kube.Tracker().Delete(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, "", node); err != nil {
					panic(err)
				}
			},
			check: apierrors.IsNotFound,
		},
		{
			name: "status write conflicts",
			setup: func(h *harness) {
				h.status.fail = func() error {
					return apierrors.NewConflict(schema.GroupResource{Group: "nodewise.io", Resource: "noderollouts"}, "r", errors.New("stale"))
				}
			},
			check: apierrors.IsConflict,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, drainRecord(), standardPods()...)
			tt.setup(h)
			rec := drainRecord()
			got, drained, err := h.d.Drain(t.Context(), testRollout(), autoPolicy(t, nil), node, rec, now.Add(time.Minute))
			if drained || !tt.check(err) || !strings.Contains(err.Error(), "persisting the drain decision for node n1") {
				t.Fatalf("Drain = drained %v, %v; want false and the API's error", drained, err)
			}
			if !reflect.DeepEqual(got, rec) {
				t.Errorf("record %+v, want the one given %+v", got, rec)
			}
			if ev := h.evictions(); len(ev) != 0 {
				t.Errorf("evictions %q, want none", ev)
			}
			if ev := h.events.all(); len(ev) != 0 {
				t.Errorf("events %+v, want none", ev)
			}
		})
	}
}

// TestAutoCannotObserve: when auto cannot gather what it decides from (the
// pod cache fails, or the context ends while the agent is asked), Drain
// returns the error and persists nothing.
func TestAutoCannotObserve(t *testing.T) {
	// A pod cache whose indexer lacks the node index: OnNode fails.
	broken := func(h *harness, _ context.CancelFunc) {
		idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
		h.d.Targets.Pods = observe.PodCache{PodLister: corelisters.NewPodLister(idx), Index: idx}
	}
	tests := []struct {
		name  string
		mut   func(*v1alpha1.NodeRolloutSpec)
		setup func(h *harness, cancel context.CancelFunc)
		check func(error) bool
	}{
		{
			name:  "the pod cache fails (ztunnel a target)",
			setup: broken,
			check: func(err error) bool { return err != nil && strings.Contains(err.Error(), "listing pods on node n1") },
		},
		{
			name:  "the pod cache fails (ztunnel not a target)",
			mut:   func(s *v1alpha1.NodeRolloutSpec) { s.Targets = model.DefaultTargets[:1] },
			setup: broken,
			check: func(err error) bool { return err != nil && strings.Contains(err.Error(), "listing pods on node n1") },
		},
		{
			name: "the DaemonSet cache fails",
			setup: func(h *harness, _ context.CancelFunc) {
				h.d.Targets.DaemonSets = fixture.FailingDaemonSets{Err: errors.New("cache broken")}
			},
			check: func(err error) bool {
				return err != nil && strings.Contains(err.Error(), "reading DaemonSet istio-system/ztunnel: cache broken")
			},
		},
		{
			name: "the context ends while the agent is asked",
			setup: func(h *harness, cancel context.CancelFunc) {
				h.d.Agents = &agent{answer: func(ctx context.Context) (wire.Snapshot, error) {
					cancel()
					return wire.Snapshot{}, ctx.Err()
				}}
			},
			check: func(err error) bool { return errors.Is(err, context.Canceled) },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, drainRecord(), standardPods()...)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			tt.setup(h, cancel)
			_, drained, err := h.d.Drain(ctx, testRollout(), autoPolicy(t, tt.mut), node, drainRecord(), now.Add(time.Minute))
			if drained || !tt.check(err) {
				t.Fatalf("Drain = drained %v, %v; want false and the expected error", drained, err)
			}
			if n := countActions(h, func(k8stesting.Action) bool { return true }); n != 0 {
				t.Errorf("%d API actions (%v), want none", n, h.kube.Actions())
			}
			if w := h.status.writes(); len(w) != 0 {
				t.Errorf("status writes %v, want none", w)
			}
		})
	}
}

// TestAutoNodeEventWithoutCachedNode: a node missing from the cache still
// gets its Event, without a UID.
func TestAutoNodeEventWithoutCachedNode(t *testing.T) {
	h := newHarness(t, drainRecord(), standardPods()...)
	h.d.Nodes = corelisters.NewNodeLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}))
	if _, drained, err := h.d.Drain(t.Context(), testRollout(), autoPolicy(t, nil), node, drainRecord(), now.Add(time.Minute)); err != nil || !drained {
		t.Fatalf("Drain = drained %v, %v; want true, nil", drained, err)
	}
	var refs []corev1.ObjectReference
	for _, e := range h.events.all() {
		if ref, ok := e.obj.(*corev1.ObjectReference); ok {
			refs = append(refs, *ref)
		}
	}
	if want := []corev1.ObjectReference{{Kind: "Node", Name: node, APIVersion: "v1"}}; !reflect.DeepEqual(refs, want) {
		t.Errorf("node events about %+v, want %+v", refs, want)
	}
}

// TestLineRecorder: find returns the last line holding the text, and the
// recorder keeps what was written last once it has more than 64 KiB.
func TestLineRecorder(t *testing.T) {
	l := &lineRecorder{}
	_, _ = l.Write([]byte("error when evicting pods/\"a\" -n \"x\": disruption budget\n"))
	_, _ = l.Write([]byte("error when evicting pods/\"b\" -n \"x\": disruption budget\nsomething else\n"))
	if got, want := l.find("disruption budget"), `error when evicting pods/"b" -n "x": disruption budget`; got != want {
		t.Errorf("find = %q, want %q", got, want)
	}
	_, _ = l.Write([]byte(strings.Repeat("x", 65<<10) + "\n"))
	_, _ = l.Write([]byte("evicting pod x/c\n"))
	if got := l.find("disruption budget"); got != "" {
		t.Errorf("find = %q after more than 64 KiB, want the old lines dropped", got)
	}
	if got := l.find("evicting pod"); got != "evicting pod x/c" {
		t.Errorf("find = %q, want the last line kept", got)
	}
	if l.buf.Len() > 64<<10 {
		t.Errorf("kept %d bytes, want at most 64 KiB", l.buf.Len())
	}
}
