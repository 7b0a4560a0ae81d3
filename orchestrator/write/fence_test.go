package write

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/leader"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
)

// recordNode is node a at resourceVersion rv holding rec as its annotations.
func recordNode(rv string, rec nodestep.Record) *corev1.Node {
	var ann []string
	for k, v := range rec.Patch(nodestep.Record{}) {
		ann = append(ann, k, *v)
	}
	return testNode("a", rv, false, ann...)
}

// TestRecordIsConditional: a step-record patch carries the resourceVersion
// of the copy it was decided from (the cache, no read). Another write to the
// node in between (the kubelet's) costs a 409 and a retry over the newer
// copy; a record someone else wrote in between (a leader that took over)
// fails it with ErrRecordMoved and stays as that writer left it.
func TestRecordIsConditional(t *testing.T) {
	fastConflicts(t)
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	const uid = "rollout-uid"
	decided := nodestep.Record{}.WithStep("r", uid, v1alpha1.NodeDrain, t0)
	next := decided.WithStep("r", uid, v1alpha1.NodeSwapCNI, t0.Add(time.Minute))
	successor := decided.WithStep("r", uid, v1alpha1.NodeDrain, t0.Add(30*time.Second)) // the new leader resumed the drain
	for _, c := range []struct {
		name        string
		api, cached *corev1.Node
		wantRVs     string // the preconditions of the patches sent
		wantStep    v1alpha1.NodeState
		wantSince   time.Time
		wantMoved   bool
	}{
		{name: "cache current", api: recordNode("5", decided), cached: recordNode("5", decided), wantRVs: "5", wantStep: v1alpha1.NodeSwapCNI, wantSince: next.StepSince},
		{name: "the kubelet wrote in between", api: withLabel(recordNode("6", decided)), cached: recordNode("5", decided), wantRVs: "5,6", wantStep: v1alpha1.NodeSwapCNI, wantSince: next.StepSince},
		{name: "a successor wrote the record, the cache is behind", api: recordNode("6", successor), cached: recordNode("5", decided), wantRVs: "5", wantMoved: true, wantStep: v1alpha1.NodeDrain, wantSince: successor.StepSince},
		{name: "a successor wrote the record, the cache shows it", api: recordNode("6", successor), cached: recordNode("6", successor), wantRVs: "", wantMoved: true, wantStep: v1alpha1.NodeDrain, wantSince: successor.StepSince},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newNodesEnv(t, []*corev1.Node{c.api}, []*corev1.Node{c.cached})
			_, err := e.w.Record(t.Context(), uid, "a", decided, next.Patch(decided))
			if moved := errors.Is(err, nodestep.ErrRecordMoved); moved != c.wantMoved || (err != nil && !moved) {
				t.Fatalf("Record: %v; want moved %v", err, c.wantMoved)
			}
			var rvs []string
			for _, p := range e.actions("patch") {
				rvs = append(rvs, decodePatch(t, p).Metadata.ResourceVersion)
			}
			if got := strings.Join(rvs, ","); got != c.wantRVs {
				t.Errorf("patches conditional on %q; want %q", got, c.wantRVs)
			}
			got := nodestep.ParseRecord(e.stored(t, "a").Annotations)
			if got.Step != c.wantStep || !got.StepSince.Equal(c.wantSince) {
				t.Errorf("stored record %s since %s; want %s since %s", got.Step, got.StepSince, c.wantStep, c.wantSince)
			}
		})
	}
}

func withLabel(n *corev1.Node) *corev1.Node {
	n.Labels = map[string]string{"kubelet": "heartbeat"}
	return n
}

// TestStatusConflictIsFenced: the status writer's answer to a 409 (re-read,
// re-apply) runs only while the fence holds. A deposed leader whose write
// meets its successor's status neither reads it nor writes over it; its
// batch stays queued, quietly, and a waiter is told it is not leading.
func TestStatusConflictIsFenced(t *testing.T) {
	api := fixture.NewRollouts(testRollout("r"))
	old := NewStatus(t.Context(), api, zap.NewNop())
	var fence error
	old.Fence = func() error { return fence }
	if err := old.Mutate(t.Context(), "r", setNode("a", v1alpha1.NodeCordon)); err != nil {
		t.Fatal(err)
	}
	// The successor takes over and writes its own status.
	successor := NewStatus(t.Context(), api, zap.NewNop())
	if err := successor.Mutate(t.Context(), "r", setNode("a", v1alpha1.NodeDone)); err != nil {
		t.Fatal(err)
	}
	before := strings.Join(api.Calls, ",")
	// The old leader's write was sent before its lease lapsed (its
	// process stopped with it in flight): it carries its resourceVersion.
	api.Fail = func(verb, _ string) error {
		fence = leader.ErrNotLeading // the lease lapsed while it was on its way
		return nil
	}
	err := old.Mutate(t.Context(), "r", setNode("a", v1alpha1.NodeSwapCNI))
	if !errors.Is(err, leader.ErrNotLeading) {
		t.Fatalf("Mutate of the deposed leader: %v; want ErrNotLeading", err)
	}
	calls := strings.TrimPrefix(strings.Join(api.Calls, ","), before+",")
	if calls != "updatestatus r" {
		t.Errorf("the deposed leader's requests: %s; want its one conditional write (409), no read, no second write", calls)
	}
	if st := api.Stored("r").Status; nodeStates(st) != "a=Done" {
		t.Errorf("stored status %s; want the successor's a=Done", nodeStates(st))
	}
	if n := countCalls(api, "updatestatus r"); n != 3 {
		t.Errorf("%d status writes; want 3", n)
	}
}
