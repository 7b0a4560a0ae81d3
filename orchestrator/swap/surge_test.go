package swap

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
)

func TestNextSurgeStep(t *testing.T) {
	for _, c := range []struct {
		name   string
		pods   []*corev1.Pod
		kind   SurgeStepKind
		pod    string   // SurgeStep.Pod
		older  []string // SurgeStep.Older
		hand   bool
		anchor string // SurgeStep.Anchor
	}{
		{"old pod only: start a bridge anchored by it", []*corev1.Pod{fixture.SurgePod("old", "old", 0)}, SurgeCreateBridge, "old", nil, false, "old"},
		{"bridge starting: wait", []*corev1.Pod{fixture.SurgePod("old", "old", 0), fixture.SurgePod("b", "new", time.Hour, fixture.Bridged, fixture.NotReady)}, SurgeWaitReady, "b", nil, false, ""},
		{"bridge Ready: retire its anchor, which hands it over", []*corev1.Pod{fixture.SurgePod("b", "new", time.Hour, fixture.Bridged), fixture.SurgePod("old", "old", 0)}, SurgeRetire, "b", []string{"old"}, true, ""},
		{"anchor fixture.Terminating (crash after its deletion): the garbage collector hands over",
			[]*corev1.Pod{fixture.SurgePod("old", "old", 0, fixture.Terminating), fixture.SurgePod("b", "new", time.Hour, fixture.Bridged)}, SurgeWaitController, "b", nil, false, ""},
		{"anchor gone, the bridge still names it: wait for the garbage collector",
			[]*corev1.Pod{fixture.SurgePod("b", "new", time.Hour, fixture.Bridged)}, SurgeWaitController, "b", nil, false, ""},
		{"handed over, not adopted yet: wait for the DaemonSet", []*corev1.Pod{fixture.SurgePod("b", "new", time.Hour, fixture.Bridged, fixture.HandedOver)}, SurgeWaitController, "b", nil, false, ""},
		{"adopted: done", []*corev1.Pod{fixture.SurgePod("old", "old", 0, fixture.Terminating), fixture.SurgePod("b", "new", time.Hour)}, SurgeDone, "b", nil, false, ""},
		{"adopted, still labelled a bridge: done", []*corev1.Pod{fixture.SurgePod("b", "new", time.Hour, func(p *corev1.Pod) { p.Labels[model.LabelSurgeBridge] = "ztunnel" })}, SurgeDone, "b", nil, false, ""},
		{"the DaemonSet's own pod beside a bridge is newest: retire the bridge",
			[]*corev1.Pod{fixture.SurgePod("ds", "new", 2*time.Hour), fixture.SurgePod("b", "new", time.Hour, fixture.Bridged)}, SurgeRetire, "ds", []string{"b"}, false, ""},
		{"rollback: the newest pod is on a revision no longer newest: a fresh bridge", []*corev1.Pod{fixture.SurgePod("newer", "newer", time.Hour)}, SurgeCreateBridge, "newer", nil, false, "newer"},
		{"rollback beside a bridge not handed over: the fresh bridge is anchored by the DaemonSet's pod, not the bridge",
			[]*corev1.Pod{fixture.SurgePod("old", "old", 0), fixture.SurgePod("mid", "mid", time.Hour, fixture.Bridged)}, SurgeCreateBridge, "mid", nil, false, "old"},
		{"rollback bridge in the same second as the pod it replaces is newer",
			[]*corev1.Pod{fixture.SurgePod("b2", "new", time.Hour, fixture.BridgedBy("newer")), fixture.SurgePod("newer", "newer", time.Hour)}, SurgeRetire, "b2", []string{"newer"}, true, ""},
		{"two older pods: the anchor goes last", []*corev1.Pod{fixture.SurgePod("b", "new", 3*time.Hour, fixture.Bridged), fixture.SurgePod("mid", "mid", time.Hour, fixture.Bridged), fixture.SurgePod("old", "old", 0)},
			SurgeRetire, "b", []string{"mid", "old"}, true, ""},
		{"old revision, no pod of the DaemonSet to anchor a bridge: wait for its adoption",
			[]*corev1.Pod{fixture.SurgePod("x", "old", 0, fixture.HandedOver)}, SurgeWaitController, "x", nil, false, ""},
		{"no live pod: the DaemonSet creates one", []*corev1.Pod{fixture.SurgePod("old", "old", 0, fixture.Terminating)}, SurgeWaitController, "", nil, false, ""},
		{"pods on other nodes and of other owners are not ours", []*corev1.Pod{fixture.SurgePod("old", "old", 0), fixture.SurgePod("x", "new", time.Hour, fixture.OnNode("n2")),
			fixture.SurgePod("y", "new", time.Hour, func(p *corev1.Pod) { p.OwnerReferences[0].UID = "other" })}, SurgeCreateBridge, "old", nil, false, "old"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := NextSurgeStep(SurgeInput{DaemonSet: fixture.SurgeDS, Revision: fixture.SurgeRev, Node: "n1", Pods: c.pods})
			var pod, anchor string
			if got.Pod != nil {
				pod = got.Pod.Name
			}
			if got.Anchor != nil {
				anchor = got.Anchor.Name
			}
			var older []string
			for _, p := range got.Older {
				older = append(older, p.Name)
			}
			if got.Kind != c.kind || pod != c.pod || strings.Join(older, ",") != strings.Join(c.older, ",") || got.HandOver != c.hand || anchor != c.anchor {
				t.Errorf("got %s pod=%q older=%v handOver=%v anchor=%q (%s); want %s pod=%q older=%v handOver=%v anchor=%q", got.Kind, pod, older, got.HandOver, anchor, got.Reason, c.kind, c.pod, c.older, c.hand, c.anchor)
			}
			if got.Kind == SurgeCreateBridge {
				if ctl := metav1.GetControllerOf(got.Bridge); ctl == nil || ctl.Kind != "Pod" || ctl.Name != c.anchor || ctl.UID != got.Anchor.UID {
					t.Errorf("bridge controller %+v; want the anchor %s", ctl, c.anchor)
				}
			}
			if got.Reason == "" {
				t.Errorf("no reason")
			}
		})
	}
}

func TestBridgePodIsWhatTheDaemonSetWouldCreate(t *testing.T) {
	anchor := fixture.SurgePod("old", "old", 0)
	b := BridgePod(fixture.SurgeDS, fixture.SurgeRev, "n1", anchor)
	if b.Spec.NodeName != "n1" || b.Namespace != "istio-system" || !strings.HasPrefix(b.Name, "ztunnel-surge-") {
		t.Errorf("bridge %s/%s on %q", b.Namespace, b.Name, b.Spec.NodeName)
	}
	for k, v := range map[string]string{"app": "ztunnel", "istio.io/rev": "1-28", model.LabelControllerRevisionHash: "new", labelPodTemplateGeneration: "2", model.LabelSurgeBridge: "ztunnel"} {
		if b.Labels[k] != v {
			t.Errorf("label %s=%q, want %q", k, b.Labels[k], v)
		}
	}
	c := metav1.GetControllerOf(b)
	if c == nil || c.APIVersion != "v1" || c.Kind != "Pod" || c.Name != "old" || c.UID != "old-uid" || *c.BlockOwnerDeletion {
		t.Errorf("controller %+v; want the anchor pod, not blocking its deletion", c)
	}
	tol := map[string]corev1.TolerationOperator{}
	for _, x := range b.Spec.Tolerations {
		tol[x.Key+"/"+string(x.Effect)] = x.Operator
	}
	if len(tol) != 6 || tol[corev1.TaintNodeUnschedulable+"/NoSchedule"] != corev1.TolerationOpExists || tol[corev1.TaintNodeNotReady+"/NoExecute"] != corev1.TolerationOpExists {
		t.Errorf("tolerations %v; want the DaemonSet controller's six, unschedulable replaced by Exists", tol)
	}
	req := b.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(req) != 1 || req[0].MatchFields[0].Values[0] != "n1" {
		t.Errorf("node affinity %+v; want metadata.name in [n1]", req)
	}
	if fixture.SurgeDS.Spec.Template.Labels[model.LabelSurgeBridge] != "" || len(fixture.SurgeDS.Spec.Template.Spec.Tolerations) != 1 {
		t.Errorf("BridgePod changed the DaemonSet's template")
	}
	// The name is deterministic (a repeated create finds it) and differs by
	// node and by revision number (a rollback reuses the hash).
	again := fixture.SurgeRev.DeepCopy()
	again.Revision = 3
	if BridgePod(fixture.SurgeDS, fixture.SurgeRev, "n1", anchor).Name != b.Name || BridgePod(fixture.SurgeDS, fixture.SurgeRev, "n2", anchor).Name == b.Name || BridgePod(fixture.SurgeDS, again, "n1", anchor).Name == b.Name {
		t.Errorf("bridge names: not deterministic per node and revision")
	}
}

func TestSurgeLeftoversAreNeverReadyBridges(t *testing.T) {
	in := SurgeInput{DaemonSet: fixture.SurgeDS, Revision: fixture.SurgeRev, Node: "n1", Pods: []*corev1.Pod{
		fixture.SurgePod("old", "old", 0), fixture.SurgePod("b", "new", time.Hour, fixture.Bridged, fixture.NotReady)}}
	if got := SurgeLeftovers(in); len(got) != 1 || got[0].Name != "b" {
		t.Errorf("leftovers %v; want the never-Ready bridge", got)
	}
	in.Pods[1] = fixture.SurgePod("b", "new", time.Hour, fixture.Bridged)
	if got := SurgeLeftovers(in); len(got) != 0 {
		t.Errorf("leftovers %v; a Ready bridge is the newest ztunnel and is finished, not deleted", got)
	}
}

// TestShowsOwnWrites: Swap waits until its input shows each of its last
// writes, matched by name and UID.
func TestShowsOwnWrites(t *testing.T) {
	old, b := fixture.SurgePod("old", "old", 0), fixture.SurgePod("b", "new", time.Hour, fixture.Bridged)
	created := []expectation{{name: "b", want: func(p *corev1.Pod) bool { return p != nil }}}
	gone := []expectation{expectGone(old)}
	in := func(pods ...*corev1.Pod) SurgeInput { return SurgeInput{Pods: pods} }
	for _, c := range []struct {
		name   string
		in     SurgeInput
		expect []expectation
		want   bool
	}{
		{"bridge not in the cache yet", in(old), created, false},
		{"bridge in the cache", in(old, b), created, true},
		{"deleted pod still live in the cache", in(old, b), gone, false},
		{"deleted pod fixture.Terminating", in(fixture.SurgePod("old", "old", 0, fixture.Terminating), b), gone, true},
		{"deleted pod gone", in(b), gone, true},
		{"a pod of the same name, another UID", in(fixture.SurgePod("old", "old", 0, func(p *corev1.Pod) { p.UID = "other" }), b), gone, true},
		{"all of them", in(old, b), append(created, gone...), false},
	} {
		if got := shows(c.in, c.expect); got != c.want {
			t.Errorf("%s: shows = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestSwapPastItsDeadlineWaitsForTheAdoption: a swap resumed past its
// deadline retires the Ready bridge's anchor, which hands the bridge over;
// the garbage collector's and the DaemonSet controller's part that follows
// is waited for, not timed out at once. The anchor is deleted with
// propagationPolicy Orphan, by UID.
func TestSwapPastItsDeadlineWaitsForTheAdoption(t *testing.T) {
	old, b := fixture.SurgePod("old", "old", 0), fixture.SurgePod("b", "new", time.Hour, fixture.Bridged)
	kube := fake.NewClientset(old.DeepCopy(), b.DeepCopy())
	looks := 0
	observe := func(ctx context.Context) (SurgeInput, error) {
		looks++
		pl, err := kube.CoreV1().Pods("istio-system").List(ctx, metav1.ListOptions{})
		if err != nil {
			return SurgeInput{}, err
		}
		var pods []*corev1.Pod
		for i := range pl.Items {
			p := &pl.Items[i]
			if p.Name == "b" && looks > 5 {
				p.OwnerReferences = fixture.SurgePod("x", "new", 0).OwnerReferences // handed over and adopted, a few looks later
			}
			pods = append(pods, p)
		}
		return SurgeInput{DaemonSet: fixture.SurgeDS, Revision: fixture.SurgeRev, Node: "n1", Pods: pods}, nil
	}
	s := Surger{Kube: kube, Poll: time.Millisecond, Observe: observe}
	res, err := s.Swap(context.Background(), v1alpha1.TargetRef{Namespace: "istio-system", Name: "ztunnel"}, "n1", time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatalf("swap resumed past its deadline: %v", err)
	}
	if res.HandedOver != "b" || res.Pod != "b" || res.Writes != 1 {
		t.Errorf("result %+v; want b handed over by one delete and kept", res)
	}
	var deletes []string
	for _, a := range kube.Actions() {
		if d, ok := a.(k8stesting.DeleteAction); ok {
			o := d.GetDeleteOptions()
			if o.PropagationPolicy == nil || *o.PropagationPolicy != metav1.DeletePropagationOrphan || o.Preconditions == nil || *o.Preconditions.UID != old.UID {
				t.Errorf("deleted %s with %+v; want propagationPolicy Orphan and the UID precondition", d.GetName(), o)
			}
			deletes = append(deletes, d.GetName())
		} else if a.GetVerb() != "list" {
			t.Errorf("unexpected %s %s: a surge swap only creates and deletes", a.GetVerb(), a.GetResource().Resource)
		}
	}
	if strings.Join(deletes, ",") != "old" {
		t.Errorf("deleted %v; want the anchor old alone", deletes)
	}
}

// TestSurgeTimeoutCountsFromTheBridge: with BridgeTimeout, a swap whose
// caller's deadline has passed (a swap with no record of its own counts from
// the record before it) still waits for a bridge created within the timeout,
// and times out once the bridge is older than that: the bridge's creation,
// which any successor reads from the API, is where the swap's clock runs.
func TestSurgeTimeoutCountsFromTheBridge(t *testing.T) {
	now := fixture.SurgeT0.Add(time.Hour)
	old := fixture.SurgePod("ztunnel-old", "old", 0)
	for _, tc := range []struct {
		name          string
		bridgeAge     time.Duration
		bridgeTimeout time.Duration
		timesOut      bool
	}{
		{"bridge a minute old, 5m timeout: waits", time.Minute, 5 * time.Minute, false},
		{"bridge six minutes old, 5m timeout: times out", 6 * time.Minute, 5 * time.Minute, true},
		{"no BridgeTimeout: the caller's deadline", time.Minute, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := BridgePod(fixture.SurgeDS, fixture.SurgeRev, "n1", old)
			b.CreationTimestamp = metav1.NewTime(now.Add(-tc.bridgeAge))
			b.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}}
			s := Surger{Kube: fake.NewClientset(b), Poll: time.Millisecond, Now: func() time.Time { return now }, BridgeTimeout: tc.bridgeTimeout,
				Observe: func(context.Context) (SurgeInput, error) {
					return SurgeInput{DaemonSet: fixture.SurgeDS, Revision: fixture.SurgeRev, Node: "n1", Pods: []*corev1.Pod{old, b}}, nil
				}}
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			_, err := s.Swap(ctx, v1alpha1.TargetRef{Namespace: "istio-system", Name: "ztunnel"}, "n1", now.Add(-time.Minute))
			if got := errors.Is(err, ErrSurgeTimeout); got != tc.timesOut {
				t.Errorf("Swap: %v; timed out %v, want %v", err, got, tc.timesOut)
			}
		})
	}
}
