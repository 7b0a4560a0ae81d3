package nodestep

import (
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/planner"
)

func TestDecideAuto(t *testing.T) {
	now := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	agentStart := now.Add(-time.Hour)
	pod := func(name string, age time.Duration, mut ...func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: types.UID("uid-" + name)},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &metav1.Time{Time: now.Add(-age)}}}
		for _, m := range mut {
			m(p)
		}
		return p
	}
	daemon := func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "ztunnel"}}
	}
	mirror := func(p *corev1.Pod) { p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "x"} }
	done := func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }
	// ages puts n connections in the bucket holding age (bucket i ends at bound i).
	ages := func(age time.Duration, n uint64) []uint64 {
		a := make([]uint64, len(wire.AgeBucketBoundsSeconds)+1)
		i := len(wire.AgeBucketBoundsSeconds)
		for j, b := range wire.AgeBucketBoundsSeconds {
			if age.Seconds() < b {
				i = j
				break
			}
		}
		a[i] = n
		return a
	}
	counters := func(name string, side wire.Side, a []uint64) wire.PodCounters {
		return wire.PodCounters{Namespace: "shop", Name: name, UID: "uid-" + name, Side: side, ConnAges: a}
	}
	snap := func(pcs ...wire.PodCounters) wire.Snapshot {
		return wire.Snapshot{Node: "n1", Time: now, StartTime: agentStart, Mode: wire.ModeEBPF, Pods: pcs}
	}
	const deadline = 25 * time.Second
	for _, tc := range []struct {
		name      string
		in        AutoInput
		drain     bool
		reasonHas []string
	}{
		{
			name:      "young connections only: in place",
			in:        AutoInput{Pods: []*corev1.Pod{pod("a", time.Minute)}, Snapshot: snap(counters("a", wire.SideApp, ages(3*time.Second, 40)), counters("a", wire.SideProxy, ages(20*time.Second, 2)))},
			reasonHas: []string{"in place", "no connection open longer than 25s (ztunnel's drain deadline 25s cuts what is still open) among 1 pods"},
		},
		{
			name:      "longLivedAfter 5s: only short requests stay in place",
			in:        AutoInput{LongLived: 5 * time.Second, Pods: []*corev1.Pod{pod("a", time.Minute)}, Snapshot: snap(counters("a", wire.SideApp, ages(500*time.Millisecond, 40)))},
			reasonHas: []string{"in place", "open longer than 5s"},
		},
		{
			name:      "longLivedAfter 5s: a 10s stream under a 25s deadline drains (it is cut if it lives on)",
			in:        AutoInput{LongLived: 5 * time.Second, Pods: []*corev1.Pod{pod("a", time.Minute)}, Snapshot: snap(counters("a", wire.SideApp, ages(10*time.Second, 1)))},
			drain:     true,
			reasonHas: []string{"drain: connections open longer than 5s", "shop/a (1)"},
		},
		{
			name:      "longLivedAfter 5s: a pod 3s old cannot hold one and needs no ages",
			in:        AutoInput{LongLived: 5 * time.Second, Pods: []*corev1.Pod{pod("a", time.Minute), pod("new", 3*time.Second)}, Snapshot: snap(counters("a", wire.SideApp, ages(0, 1)))},
			reasonHas: []string{"in place", "among 2 pods"},
		},
		{
			name:      "longLivedAfter above the deadline is capped by it",
			in:        AutoInput{LongLived: time.Minute, Pods: []*corev1.Pod{pod("a", time.Hour)}, Snapshot: snap(counters("a", wire.SideApp, ages(30*time.Second, 1)))},
			drain:     true,
			reasonHas: []string{"open longer than 25s"},
		},
		{
			name:      "one connection at the deadline: drain, naming the pod",
			in:        AutoInput{Pods: []*corev1.Pod{pod("a", time.Minute), pod("b", time.Minute)}, Snapshot: snap(counters("a", wire.SideApp, ages(time.Second, 5)), counters("b", wire.SideApp, ages(25*time.Second, 1)))},
			drain:     true,
			reasonHas: []string{"drain: ", "deadline 25s", "shop/b (1)"},
		},
		{
			name:      "proxy side counts too (ztunnel's in-pod sockets carry the pod's traffic)",
			in:        AutoInput{Pods: []*corev1.Pod{pod("a", time.Hour)}, Snapshot: snap(counters("a", wire.SideApp, ages(0, 0)), counters("a", wire.SideProxy, ages(10*time.Minute, 3)))},
			drain:     true,
			reasonHas: []string{"shop/a (3)"},
		},
		{
			name:      "a shorter grace period lowers the deadline: 12s (grace 17s) catches a 15s connection",
			in:        AutoInput{Deadline: health.DrainDeadline(17 * time.Second), Pods: []*corev1.Pod{pod("a", time.Minute)}, Snapshot: snap(counters("a", wire.SideApp, ages(15*time.Second, 1)))},
			drain:     true,
			reasonHas: []string{"deadline 12s"},
		},
		{
			name:      "a bucket straddling the deadline counts whole: 12s deadline, a [10s,15s) connection drains",
			in:        AutoInput{Deadline: health.DrainDeadline(17 * time.Second), Pods: []*corev1.Pod{pod("a", time.Minute)}, Snapshot: snap(counters("a", wire.SideApp, ages(11*time.Second, 1)))},
			drain:     true,
			reasonHas: []string{"shop/a (1)"},
		},
		{
			name: "DaemonSet, mirror and finished pods stay either way: their old connections do not drain",
			in: AutoInput{Pods: []*corev1.Pod{pod("a", time.Minute), pod("zt", time.Minute, daemon), pod("static", time.Minute, mirror), pod("job", time.Minute, done)},
				Snapshot: snap(counters("a", wire.SideApp, ages(time.Second, 1)), counters("zt", wire.SideApp, ages(time.Hour, 9)), counters("static", wire.SideApp, ages(time.Hour, 9)), counters("job", wire.SideApp, ages(time.Hour, 9)))},
			reasonHas: []string{"in place", "among 1 pods"},
		},
		{
			name:      "nothing a drain would move: in place without asking the agent",
			in:        AutoInput{Pods: []*corev1.Pod{pod("zt", time.Hour, daemon)}, AgentErr: errors.New("never asked")},
			reasonHas: []string{"in place: no pod on the node that a drain would move"},
		},
		{
			name:      "ztunnel not a target: nothing is reset",
			in:        AutoInput{Pods: []*corev1.Pod{pod("a", time.Hour)}, AgentErr: errors.New("down")},
			reasonHas: []string{"ztunnel is not a target"},
		},
		{
			name:      "agent unreachable: drain (fail safe) with the agent's error",
			in:        AutoInput{Pods: []*corev1.Pod{pod("a", time.Minute)}, AgentErr: errors.New("node agent unavailable: node n1: timeout")},
			drain:     true,
			reasonHas: []string{"fail safe", "timeout"},
		},
		{
			name: "proc mode has no ages: drain",
			in: AutoInput{Pods: []*corev1.Pod{pod("a", time.Minute)}, Snapshot: func() wire.Snapshot {
				s := snap(counters("a", wire.SideApp, ages(0, 0)))
				s.Mode = wire.ModeProc
				return s
			}()},
			drain:     true,
			reasonHas: []string{"proc mode"},
		},
		{
			name:      "ages of another shape are unknown: drain",
			in:        AutoInput{Pods: []*corev1.Pod{pod("a", time.Minute)}, Snapshot: snap(counters("a", wire.SideApp, []uint64{0, 0}))},
			drain:     true,
			reasonHas: []string{"shop/a has no connection ages"},
		},
		{
			name:      "a pod older than the deadline missing from the snapshot: drain",
			in:        AutoInput{Pods: []*corev1.Pod{pod("a", time.Minute), pod("b", time.Minute)}, Snapshot: snap(counters("a", wire.SideApp, ages(0, 0)))},
			drain:     true,
			reasonHas: []string{"shop/b is not in the agent's snapshot"},
		},
		{
			name:      "a pod younger than the deadline needs no ages",
			in:        AutoInput{Pods: []*corev1.Pod{pod("a", time.Minute), pod("new", 5*time.Second)}, Snapshot: snap(counters("a", wire.SideApp, ages(0, 0)))},
			reasonHas: []string{"in place", "among 2 pods"},
		},
		{
			name:      "a pod that started before the agent may hold connections it never saw: drain",
			in:        AutoInput{Pods: []*corev1.Pod{pod("a", 2*time.Hour)}, Snapshot: snap(counters("a", wire.SideApp, ages(0, 0)))},
			drain:     true,
			reasonHas: []string{"shop/a started before the agent"},
		},
		{
			name: "a pod matched by name when the agent has no UID",
			in: AutoInput{Pods: []*corev1.Pod{pod("a", time.Minute)}, Snapshot: snap(func() wire.PodCounters {
				c := counters("a", wire.SideApp, ages(time.Minute, 2))
				c.UID = ""
				return c
			}())},
			drain:     true,
			reasonHas: []string{"shop/a (2)"},
		},
		{
			name: "a recreated pod with the same name does not inherit its predecessor's ages",
			in: AutoInput{Pods: []*corev1.Pod{pod("a", time.Minute)}, Snapshot: snap(func() wire.PodCounters {
				c := counters("a", wire.SideApp, ages(time.Hour, 7))
				c.UID = "uid-a-before"
				return c
			}(), counters("a", wire.SideApp, ages(0, 1)))},
			reasonHas: []string{"in place"},
		},
		{
			name:      "surge: short requests only stay in place, and the reason says why",
			in:        AutoInput{Swap: model.SwapSurge, LongLived: 5 * time.Second, Pods: []*corev1.Pod{pod("a", time.Minute)}, Snapshot: snap(counters("a", wire.SideApp, ages(500*time.Millisecond, 40)))},
			reasonHas: []string{"in place: no connection open longer than 5s", "; surge: the new ztunnel listens beside the old one, so short requests are never refused"},
		},
		{
			name:      "surge: a stream that would outlive the deadline still drains",
			in:        AutoInput{Swap: model.SwapSurge, LongLived: 5 * time.Second, Pods: []*corev1.Pod{pod("a", time.Minute)}, Snapshot: snap(counters("a", wire.SideApp, ages(10*time.Second, 1)))},
			drain:     true,
			reasonHas: []string{"drain: connections open longer than 5s", "shop/a (1)"},
		},
		{
			name:      "replace: short requests drain, since nothing listens while the old ztunnel goes",
			in:        AutoInput{Swap: model.SwapReplace, LongLived: 5 * time.Second, Pods: []*corev1.Pod{pod("a", time.Minute)}, Snapshot: snap(counters("a", wire.SideApp, ages(500*time.Millisecond, 40)))},
			drain:     true,
			reasonHas: []string{"break-before-make (replace)", "shop/a carry traffic"},
		},
		{
			name: "replace: an idle pod stays in place",
			in: AutoInput{Swap: model.SwapReplace, LongLived: 5 * time.Second, Pods: []*corev1.Pod{pod("a", time.Minute)},
				Snapshot: snap(counters("a", wire.SideApp, make([]uint64, len(wire.AgeBucketBoundsSeconds)+1)))},
			reasonHas: []string{"in place: no connection"},
		},
		{
			name: "many pods are named up to three",
			in: AutoInput{Pods: []*corev1.Pod{pod("a", time.Minute), pod("b", time.Minute), pod("c", time.Minute), pod("d", time.Minute)},
				Snapshot: snap(counters("a", wire.SideApp, ages(time.Minute, 1)), counters("b", wire.SideApp, ages(time.Minute, 1)), counters("c", wire.SideApp, ages(time.Minute, 1)), counters("d", wire.SideApp, ages(time.Minute, 1)))},
			drain:     true,
			reasonHas: []string{"shop/a (1), shop/b (1), shop/c (1) and 1 more"},
		},
	} {
		in := tc.in
		if in.Deadline == 0 {
			in.Deadline = deadline
		}
		in.SwapsZtunnel = !strings.Contains(tc.name, "ztunnel not a target")
		got := DecideAuto(in)
		if got.Drain != tc.drain {
			t.Errorf("%s: drain %v, want %v (reason %q)", tc.name, got.Drain, tc.drain, got.Reason)
		}
		for _, w := range tc.reasonHas {
			if !strings.Contains(got.Reason, w) {
				t.Errorf("%s: reason %q lacks %q", tc.name, got.Reason, w)
			}
		}
	}
}

func TestPersistedAuto(t *testing.T) {
	since := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	at := func(d time.Duration) string { return since.Add(d).Format(time.RFC3339Nano) }
	ann := func(uid, decision, decidedAt string) map[string]string {
		return map[string]string{model.AnnotationRolloutUID: uid, model.AnnotationDrainDecision: decision, model.AnnotationDrainDecidedAt: decidedAt}
	}
	for _, tc := range []struct {
		name      string
		ann       map[string]string
		drain, ok bool
	}{
		{"in place, this attempt", ann("u1", DrainDecisionInPlace, at(time.Second)), false, true},
		{"drain, this attempt", ann("u1", DrainDecisionDrain, at(0)), true, true},
		{"an earlier attempt's decision is decided again", ann("u1", DrainDecisionInPlace, at(-time.Second)), false, false},
		{"another rollout's decision is decided again", ann("u0", DrainDecisionDrain, at(time.Second)), false, false},
		{"no decision", map[string]string{model.AnnotationRolloutUID: "u1"}, false, false},
		{"an unknown value is decided again", ann("u1", "maybe", at(time.Second)), false, false},
	} {
		drain, ok := ParseRecord(tc.ann).AutoDecision("u1", since)
		if drain != tc.drain || ok != tc.ok {
			t.Errorf("%s: got %v, %v; want %v, %v", tc.name, drain, ok, tc.drain, tc.ok)
		}
	}
}

func TestRenderPlanSaysAutoIsDecidedPerNode(t *testing.T) {
	for _, policy := range []v1alpha1.DrainPolicy{v1alpha1.DrainAuto, v1alpha1.DrainAlways} {
		var b strings.Builder
		if err := planner.RenderPlan(&b, planner.Decision{}, model.Policy{Drain: policy}, time.Now(), 0); err != nil {
			t.Fatal(err)
		}
		says := strings.Contains(b.String(), "decided per node at run time")
		if says != (policy == v1alpha1.DrainAuto) {
			t.Errorf("drain %s: plan says auto is decided per node: %v\n%s", policy, says, b.String())
		}
	}
}
