package nodestep

import (
	"errors"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// Record is a node's progress in a rollout, as its annotations hold it
// (the keys are in constants.go). It is parsed from them here and written to
// them here (patch) and nowhere else: the worker decides from it (Next)
// and every write of a step is the record before and after.
type Record struct {
	Rollout    string
	RolloutUID types.UID
	// Step is the step about to act (written before it acts), StepSince when
	// it was written: every bound of the step counts from StepSince.
	Step      v1alpha1.NodeState
	StepSince time.Time
	// SwapSince is when the node was cordoned (the baseline window ends, the
	// swap begins); SoakSince when its soak began; DrainedAt when a drain of
	// it finished.
	SwapSince time.Time
	SoakSince time.Time
	DrainedAt time.Time
	// DrainDecision is drain policy auto's choice (DrainDecisionDrain or
	// DrainDecisionInPlace), made at DrainDecidedAt.
	DrainDecision  string
	DrainDecidedAt time.Time
	// PriorUnschedulable is "true" or "false" once recorded: whether the node
	// was cordoned before nodewise first cordoned it ("" = not recorded).
	PriorUnschedulable string
	// CordonedBy names the rollout that set spec.unschedulable.
	CordonedBy string
	// KeepCordoned is a person's AnnotationKeepCordoned (read, never
	// written): nil when the node has none; any value, "" included, keeps
	// the node cordoned.
	KeepCordoned *string
	// Swapped is, by target name, the UID of the old pod a swap deletes. An
	// empty UID deletes the entry when written.
	Swapped map[string]types.UID
}

// ParseRecord reads a node's record from its annotations. Unparseable times
// read as zero (never set).
func ParseRecord(ann map[string]string) Record {
	r := Record{
		Rollout:            ann[model.AnnotationRollout],
		RolloutUID:         types.UID(ann[model.AnnotationRolloutUID]),
		Step:               v1alpha1.NodeState(ann[model.AnnotationStep]),
		StepSince:          parseTime(ann[model.AnnotationStepSince]),
		SwapSince:          parseTime(ann[model.AnnotationSwapSince]),
		SoakSince:          parseTime(ann[model.AnnotationSoakSince]),
		DrainedAt:          parseTime(ann[model.AnnotationDrainedAt]),
		DrainDecision:      ann[model.AnnotationDrainDecision],
		DrainDecidedAt:     parseTime(ann[model.AnnotationDrainDecidedAt]),
		PriorUnschedulable: ann[model.AnnotationPriorUnschedulable],
		CordonedBy:         ann[model.AnnotationCordonedBy],
	}
	if v, ok := ann[model.AnnotationKeepCordoned]; ok {
		r.KeepCordoned = &v
	}
	for k, v := range ann {
		if name, ok := strings.CutPrefix(k, model.AnnotationSwappedPrefix); ok && v != "" {
			if r.Swapped == nil {
				r.Swapped = map[string]types.UID{}
			}
			r.Swapped[name] = types.UID(v)
		}
	}
	return r
}

// ParseStep is the part of ParseRecord that NodeState reads (the rollout
// and the step), for the planner's pass over every node.
func ParseStep(ann map[string]string) Record {
	return Record{Rollout: ann[model.AnnotationRollout], RolloutUID: types.UID(ann[model.AnnotationRolloutUID]), Step: v1alpha1.NodeState(ann[model.AnnotationStep])}
}

// Patch is the annotation merge patch that turns prev into r: every key
// whose value differs (nil deletes it).
func (r Record) Patch(prev Record) map[string]*string {
	ann := map[string]*string{}
	set := func(key, now, was string) {
		switch {
		case now == was:
		case now == "":
			ann[key] = nil
		default:
			ann[key] = Ptr(now)
		}
	}
	set(model.AnnotationRollout, r.Rollout, prev.Rollout)
	set(model.AnnotationRolloutUID, string(r.RolloutUID), string(prev.RolloutUID))
	set(model.AnnotationStep, string(r.Step), string(prev.Step))
	set(model.AnnotationStepSince, formatTime(r.StepSince), formatTime(prev.StepSince))
	set(model.AnnotationSwapSince, formatTime(r.SwapSince), formatTime(prev.SwapSince))
	set(model.AnnotationSoakSince, formatTime(r.SoakSince), formatTime(prev.SoakSince))
	set(model.AnnotationDrainedAt, formatTime(r.DrainedAt), formatTime(prev.DrainedAt))
	set(model.AnnotationDrainDecision, r.DrainDecision, prev.DrainDecision)
	set(model.AnnotationDrainDecidedAt, formatTime(r.DrainDecidedAt), formatTime(prev.DrainDecidedAt))
	set(model.AnnotationPriorUnschedulable, r.PriorUnschedulable, prev.PriorUnschedulable)
	set(model.AnnotationCordonedBy, r.CordonedBy, prev.CordonedBy)
	for name, uid := range r.Swapped {
		if uid == "" {
			ann[model.AnnotationSwappedPrefix+name] = nil // deleted, whatever prev says
			continue
		}
		set(model.AnnotationSwappedPrefix+name, string(uid), string(prev.Swapped[name]))
	}
	for name := range prev.Swapped {
		if _, ok := r.Swapped[name]; !ok {
			ann[model.AnnotationSwappedPrefix+name] = nil
		}
	}
	return ann
}

// ErrRecordMoved is a step-record write refused because the node's record
// is no longer the one the step was decided from: someone else (a leader
// that took over) wrote it meanwhile. The worker stops; the next pass
// decides again from the record as it stands.
var ErrRecordMoved = errors.New("the node's step record moved since the step was decided")

// Same says r and o hold the same record (every key Patch writes).
func (r Record) Same(o Record) bool { return len(r.Patch(o)) == 0 }

// Ours says the record belongs to the rollout with this UID.
func (r Record) Ours(uid types.UID) bool { return uid != "" && r.RolloutUID == uid }

// ForRollout is the record as a worker of rollout uid starts from: a record
// of another rollout (or of none) has no step and no times for it; the
// cordon bookkeeping and the swap records stay (they are the node's).
func (r Record) ForRollout(uid types.UID) Record {
	if r.Ours(uid) {
		return r
	}
	return Record{PriorUnschedulable: r.PriorUnschedulable, CordonedBy: r.CordonedBy, Swapped: r.Swapped}
}

// HeldByAnother says which other rollout has the node in flight ("" when
// none does): live says a rollout of that name and UID still exists. Its
// steps hold the node until they end, and a start of rollout uid would
// take the record over mid-step.
func (r Record) HeldByAnother(uid types.UID, live func(name string, uid types.UID) bool) string {
	if r.Ours(uid) || r.RolloutUID == "" || !model.InFlight(r.Step) || !live(r.Rollout, r.RolloutUID) {
		return ""
	}
	return "in flight (" + string(r.Step) + ") under NodeRollout " + r.Rollout
}

// WithStep is the record of step st written at now by rollout nr.
func (r Record) WithStep(rollout string, uid types.UID, st v1alpha1.NodeState, now time.Time) Record {
	n := r.Clone()
	n.Rollout, n.RolloutUID, n.Step, n.StepSince = rollout, uid, st, now
	return n
}

func (r Record) Clone() Record {
	n := r
	if r.Swapped != nil {
		n.Swapped = make(map[string]types.UID, len(r.Swapped))
		for k, v := range r.Swapped {
			n.Swapped[k] = v
		}
	}
	return n
}

// Cordoned is the record once rollout cordons a node that is (or is not)
// already unschedulable: the prior cordon is recorded once, before anything
// else, and only a cordon nodewise sets names it. set says
// spec.unschedulable must be set.
func (r Record) Cordoned(rollout string, unschedulable bool) (n Record, set bool) {
	n = r.Clone()
	if n.PriorUnschedulable == "" {
		n.PriorUnschedulable = boolString(unschedulable)
	}
	if unschedulable {
		return n, false
	}
	n.CordonedBy = rollout
	return n, true
}

// Uncordoned is the record once the node is handed back: the cordon
// bookkeeping goes, and clear says spec.unschedulable must be cleared: only
// when nodewise set it, the node was not cordoned before, and nobody asked
// to keep it cordoned since (AnnotationKeepCordoned).
func (r Record) Uncordoned() (n Record, clear bool) {
	n = r.Clone()
	clear = r.PriorUnschedulable != "true" && r.CordonedBy != "" && r.KeepCordoned == nil
	n.PriorUnschedulable, n.CordonedBy = "", ""
	return n, clear
}

// AutoDecision reads back drain policy auto's choice made in this attempt:
// the record is rollout uid's and the choice was made at or after the Drain
// step began (since). An older one belongs to an earlier attempt (a retry
// after resume, or a rollback) and is decided again.
func (r Record) AutoDecision(uid types.UID, since time.Time) (drain, ok bool) {
	if !r.Ours(uid) || r.DrainDecidedAt.IsZero() || r.DrainDecidedAt.Before(since) {
		return false, false
	}
	switch r.DrainDecision {
	case DrainDecisionDrain:
		return true, true
	case DrainDecisionInPlace:
		return false, true
	}
	return false, false
}

// NodeState is a node's state in a rollout, read in this one order: a claim
// by this process (a node it started whose worker has written nothing yet),
// the node's record when it is this rollout's, the rollout's status entry
// (the record of a node whose annotations another rollout took over), and
// Pending. fromRecord says the state is the record's: only then does a
// worker resume it (a state known only from status has no times to resume
// from, and starts over).
func NodeState(claim bool, r Record, uid types.UID, status v1alpha1.NodeState) (st v1alpha1.NodeState, fromRecord bool) {
	switch {
	case claim:
		return Claimed, false
	case r.Ours(uid) && r.Step != "":
		return r.Step, true
	case status != "":
		return status, false
	}
	return v1alpha1.NodePending, false
}

func boolString(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func parseTime(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t
}

// Claimed is the in-memory state of a node the planner started whose worker
// has not yet persisted its first step. It is never written to the API.
const Claimed v1alpha1.NodeState = "Claimed"

// Ptr is a pointer to a copy of v.
func Ptr[T any](v T) *T { return &v }
