package gate

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/orchestrator/observe"
)

func TestReadinessGate(t *testing.T) {
	soak := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	before, after := metav1.NewTime(soak.Add(-time.Minute)), metav1.NewTime(soak.Add(time.Minute))
	pod := func(name string, started *metav1.Time, ready bool, since metav1.Time, ds bool) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", CreationTimestamp: before},
			Spec:       corev1.PodSpec{NodeName: "n1"},
			Status:     corev1.PodStatus{StartTime: started},
		}
		if ds {
			p.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "ztunnel"}}
		}
		if started != nil {
			st := corev1.ConditionFalse
			if ready {
				st = corev1.ConditionTrue
			}
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st, LastTransitionTime: since}}
		}
		return p
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want health.Outcome
	}{
		{"ready all along", pod("a", &before, true, before, false), health.Pass},
		{"started before the soak, now not Ready", pod("b", &before, false, after, false), health.Fail},
		{"flapped Ready during the soak", pod("c", &before, true, after, false), health.Fail},
		{"app replica scheduled before the soak, still starting", pod("d", nil, false, metav1.Time{}, false), health.Pass},
		{"new DaemonSet pod not Ready", pod("e", nil, false, metav1.Time{}, true), health.Fail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			_ = nodes.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
				Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}})
			_ = pods.Add(tc.pod)
			g := ReadinessGate{Nodes: corelisters.NewNodeLister(nodes), Pods: observe.PodCache{PodLister: corelisters.NewPodLister(pods)}}
			v, err := g.Judge(context.Background(), GateInput{Node: "n1", SoakStart: soak, Now: soak.Add(2 * time.Minute)})
			if err != nil || v.Outcome != tc.want {
				t.Fatalf("got %s %v (%v), want %s", v.Outcome, v.Reasons, err, tc.want)
			}
		})
	}
}

// TestReadinessGateSeesANodeThatFlapped: a node Ready at the end of its soak
// but whose Ready condition changed during it (it was NotReady for a while,
// however short) fails; the verdict of a pass says what was seen.
func TestReadinessGateSeesANodeThatFlapped(t *testing.T) {
	soak := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		status  corev1.ConditionStatus
		changed time.Time
		want    health.Outcome
		reason  string
		// into is how far into its second the soak began (the API keeps
		// transition times in whole seconds).
		into time.Duration
	}{
		{"Ready since before the soak", corev1.ConditionTrue, soak.Add(-time.Hour), health.Pass, "none with a Ready transition since the soak began", 0},
		{"NotReady for a second in the soak, Ready again", corev1.ConditionTrue, soak.Add(20 * time.Second), health.Fail, "Ready condition changed during the soak", 0},
		{"NotReady at the end", corev1.ConditionFalse, soak.Add(20 * time.Second), health.Fail, "is not Ready", 0},
		{"flapped within the second the soak began", corev1.ConditionTrue, soak, health.Fail, "Ready condition changed during the soak", 700 * time.Millisecond},
		{"Ready since the second before the soak", corev1.ConditionTrue, soak.Add(-time.Second), health.Pass, "none with a Ready transition", 700 * time.Millisecond},
		{"Unknown at the end", corev1.ConditionUnknown, soak.Add(-time.Hour), health.Fail, "is not Ready", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			_ = nodes.Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
				Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: tc.status, LastTransitionTime: metav1.NewTime(tc.changed)}}}})
			pods := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
			g := ReadinessGate{Nodes: corelisters.NewNodeLister(nodes), Pods: observe.PodCache{PodLister: corelisters.NewPodLister(pods)}}
			v, err := g.Judge(context.Background(), GateInput{Node: "n1", SoakStart: soak.Add(tc.into), Now: soak.Add(time.Minute)})
			if err != nil || v.Outcome != tc.want || len(v.Reasons) == 0 || !strings.Contains(v.Reasons[0], tc.reason) {
				t.Fatalf("got %s %v (%v), want %s with %q", v.Outcome, v.Reasons, err, tc.want, tc.reason)
			}
			// The line leads with the headline: a pass in a few words, a
			// failure with the readiness problem.
			if want := map[health.Outcome]string{health.Pass: "Pass: the node and its 0 pods Ready through the soak", health.Fail: "Fail: " + v.Reasons[0]}[tc.want]; v.Line() != want {
				t.Errorf("line %q, want %q", v.Line(), want)
			}
			// Whatever the outcome, the detail says why no baseline was waited.
			if !slices.Contains(v.Reasons, ReasonNoBaseline) {
				t.Errorf("reasons %q do not say the baseline was skipped", v.Reasons)
			}
		})
	}
}

// TestJudgedSince: a persisted judgement is carried into the gate only when
// it was made in this soak, never an earlier attempt's.
func TestJudgedSince(t *testing.T) {
	soak := time.Date(2026, 12, 1, 10, 0, 0, 500_000_000, time.UTC)
	for _, tc := range []struct {
		at   string
		want bool
	}{
		{"2026-12-01T10:00:00Z", true}, // the soak's own second (RFC 3339 drops the fraction)
		{"2026-12-01T10:03:00Z", true},
		{"2026-12-01T09:59:59Z", false}, // an earlier attempt's
		{"", false},
	} {
		j := &v1alpha1.NodeJudgement{JudgedAt: tc.at}
		if got := JudgedSince(j, soak) != nil; got != tc.want {
			t.Errorf("judged at %q, soak %s: carried %v, want %v", tc.at, soak, got, tc.want)
		}
	}
	if JudgedSince(nil, soak) != nil {
		t.Error("nil carried")
	}
}
