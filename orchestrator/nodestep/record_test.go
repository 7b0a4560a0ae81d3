package nodestep

import (
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// apply merges a patch into annotations the way the API server does.
func apply(ann map[string]string, patch map[string]*string) map[string]string {
	out := map[string]string{}
	for k, v := range ann {
		out[k] = v
	}
	for k, v := range patch {
		if v == nil {
			delete(out, k)
		} else {
			out[k] = *v
		}
	}
	return out
}

// TestRecordRoundTrip: every field written by patch is read back by
// ParseRecord, and a record patched from another reads back as itself.
func TestRecordRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 1, 9, 0, 0, 123456789, time.UTC)
	full := Record{
		Rollout: "r", RolloutUID: "u1", Step: v1alpha1.NodeSoak, StepSince: at,
		SwapSince: at.Add(-time.Minute), SoakSince: at, DrainedAt: at.Add(-30 * time.Second),
		DrainDecision: DrainDecisionDrain, DrainDecidedAt: at.Add(-40 * time.Second),
		PriorUnschedulable: "false", CordonedBy: "r",
		Swapped: map[string]types.UID{"ztunnel": "pod-uid"},
	}
	ann := apply(map[string]string{"other.io/key": "kept"}, full.Patch(Record{}))
	if got := ParseRecord(ann); !reflect.DeepEqual(got, full) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, full)
	}
	if ann["other.io/key"] != "kept" {
		t.Error("a key nodewise does not own was touched")
	}
	// Back to an empty record: every key nodewise wrote goes.
	empty := apply(ann, Record{}.Patch(full))
	if len(empty) != 1 {
		t.Errorf("annotations after clearing the record: %v, want only the foreign key", empty)
	}
	// A patch carries only what changed.
	next := full.WithStep("r", "u1", v1alpha1.NodeGate, at.Add(time.Minute))
	if p := next.Patch(full); len(p) != 2 || *p[model.AnnotationStep] != "Gate" || p[model.AnnotationStepSince] == nil {
		t.Errorf("patch of a step change: %v, want the step and its time only", p)
	}
	// An empty swap UID deletes the key even when the record before lacks it
	// (a copy that had not seen the swap).
	cleared := Record{Swapped: map[string]types.UID{"istio-cni-node": ""}}
	if p := cleared.Patch(Record{}); len(p) != 1 || p[model.AnnotationSwappedPrefix+"istio-cni-node"] != nil {
		t.Errorf("clearing a swap record: %v", p)
	}
	if _, ok := cleared.Patch(Record{})[model.AnnotationSwappedPrefix+"istio-cni-node"]; !ok {
		t.Error("clearing a swap record sent no deletion")
	}
}

// TestRecordCordon: the prior cordon is recorded once; nodewise uncordons
// only what it cordoned.
func TestRecordCordon(t *testing.T) {
	for _, tc := range []struct {
		name          string
		rec           Record
		unschedulable bool
		want          Record
		set           bool
	}{
		{"schedulable node: record false, cordon", Record{}, false, Record{PriorUnschedulable: "false", CordonedBy: "r"}, true},
		{"already cordoned by someone: record true, leave it", Record{}, true, Record{PriorUnschedulable: "true"}, false},
		{"our own cordon, resumed: nothing changes", Record{PriorUnschedulable: "false", CordonedBy: "r"}, true, Record{PriorUnschedulable: "false", CordonedBy: "r"}, false},
		{"the prior record is kept when an operator uncordoned meanwhile", Record{PriorUnschedulable: "true"}, false, Record{PriorUnschedulable: "true", CordonedBy: "r"}, true},
	} {
		got, set := tc.rec.Cordoned("r", tc.unschedulable)
		if !reflect.DeepEqual(got, tc.want) || set != tc.set {
			t.Errorf("%s: cordoned = %+v, %v; want %+v, %v", tc.name, got, set, tc.want, tc.set)
		}
	}
	for _, tc := range []struct {
		name  string
		rec   Record
		clear bool
	}{
		{"we cordoned it", Record{PriorUnschedulable: "false", CordonedBy: "r"}, true},
		{"it was cordoned before us", Record{PriorUnschedulable: "true"}, false},
		{"never cordoned by us", Record{}, false},
		{"prior record lost, our cordon named", Record{CordonedBy: "r"}, true},
		{"ours, but a person asked to keep it cordoned", Record{PriorUnschedulable: "false", CordonedBy: "r", KeepCordoned: Ptr("disk errors")}, false},
	} {
		got, clear := tc.rec.Uncordoned()
		if got.PriorUnschedulable != "" || got.CordonedBy != "" || clear != tc.clear {
			t.Errorf("%s: uncordoned = %+v, %v; want the bookkeeping gone, clear %v", tc.name, got, clear, tc.clear)
		}
	}
}

// TestNodeState is the one order a node's state is read in.
func TestNodeState(t *testing.T) {
	ours := Record{RolloutUID: "u1", Step: v1alpha1.NodeDrain}
	theirs := Record{RolloutUID: "u0", Step: v1alpha1.NodeSoak}
	for _, tc := range []struct {
		name       string
		claim      bool
		rec        Record
		status     v1alpha1.NodeState
		want       v1alpha1.NodeState
		fromRecord bool
	}{
		{"a claim comes first", true, ours, v1alpha1.NodeDone, Claimed, false},
		{"then this rollout's record, over an older status", false, ours, v1alpha1.NodeCordon, v1alpha1.NodeDrain, true},
		{"another rollout's record: the status", false, theirs, v1alpha1.NodeDone, v1alpha1.NodeDone, false},
		{"a record without a step: the status", false, Record{RolloutUID: "u1"}, v1alpha1.NodeFailed, v1alpha1.NodeFailed, false},
		{"nothing: Pending", false, Record{}, "", v1alpha1.NodePending, false},
	} {
		got, from := NodeState(tc.claim, tc.rec, "u1", tc.status)
		if got != tc.want || from != tc.fromRecord {
			t.Errorf("%s: %s (from record %v), want %s (%v)", tc.name, got, from, tc.want, tc.fromRecord)
		}
	}
	if r := theirs.ForRollout("u1"); r.Step != "" || !r.StepSince.IsZero() {
		t.Errorf("another rollout's record as ours: %+v, want no step and no times", r)
	}
}

// TestParseStepIsParseRecord: the planner's cheap read of a record agrees
// with the full one on what NodeState reads.
func TestParseStepIsParseRecord(t *testing.T) {
	ann := map[string]string{model.AnnotationRollout: "r", model.AnnotationRolloutUID: "u1", model.AnnotationStep: "Soak", model.AnnotationStepSince: "2026-12-01T09:00:00Z"}
	full, cheap := ParseRecord(ann), ParseStep(ann)
	if cheap.Rollout != full.Rollout || cheap.RolloutUID != full.RolloutUID || cheap.Step != full.Step {
		t.Errorf("parseStep %+v, parseRecord %+v", cheap, full)
	}
}

// TestKeepCordonedAnyValue: #27 finding 8. nodewise.io/keep-cordoned keeps
// the node cordoned whatever its value, the empty one included (`kubectl
// annotate node n nodewise.io/keep-cordoned=`), as the docs say.
func TestKeepCordonedAnyValue(t *testing.T) {
	for _, v := range []string{"", "disk errors"} {
		rec := ParseRecord(map[string]string{model.AnnotationPriorUnschedulable: "false", model.AnnotationCordonedBy: "r", model.AnnotationKeepCordoned: v})
		if _, clear := rec.Uncordoned(); clear {
			t.Errorf("%s=%q: the uncordon clears spec.unschedulable; want the node kept cordoned", model.AnnotationKeepCordoned, v)
		}
	}
	if _, clear := ParseRecord(map[string]string{model.AnnotationPriorUnschedulable: "false", model.AnnotationCordonedBy: "r"}).Uncordoned(); !clear {
		t.Error("without the annotation the uncordon keeps the node cordoned")
	}
}

// TestHeldByAnother: a node in flight under another rollout that still
// exists is held (its steps must end before this one starts it); its own
// record, a settled one, or one of a rollout gone is not.
func TestHeldByAnother(t *testing.T) {
	live := func(name string, uid types.UID) bool { return name == "other" && uid == "u-other" }
	for _, tc := range []struct {
		rec  Record
		want string
	}{
		{Record{Rollout: "other", RolloutUID: "u-other", Step: v1alpha1.NodeDrain}, "in flight (Drain) under NodeRollout other"},
		{Record{Rollout: "other", RolloutUID: "u-other", Step: v1alpha1.NodeAbortCleanup}, "in flight (AbortCleanup) under NodeRollout other"},
		{Record{Rollout: "other", RolloutUID: "u-other", Step: v1alpha1.NodePending}, ""},
		{Record{Rollout: "other", RolloutUID: "u-other", Step: v1alpha1.NodeDone}, ""},
		{Record{Rollout: "other", RolloutUID: "u-gone", Step: v1alpha1.NodeDrain}, ""}, // deleted and made again
		{Record{Rollout: "me", RolloutUID: "u-me", Step: v1alpha1.NodeDrain}, ""},
		{Record{}, ""},
	} {
		if got := tc.rec.HeldByAnother("u-me", live); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.rec, got, tc.want)
		}
	}
}
