package nodestep

import (
	"fmt"
	"strings"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// The per-node state machine. Next is pure: from the node's record,
// the policy and what its worker has done since it read the record, it
// decides the one next step. The worker (orchestrator/worker) persists that step's
// record, acts, and asks again.

// stepAct is what a step does once its record, if it has one, is written.
type stepAct int

const (
	// actNone: the record is the whole step (with its cordon or uncordon).
	actNone stepAct = iota
	// actPreflight checks the node, the skew and the gate, then waits out
	// the baseline window (Timeout from the record's StepSince).
	ActPreflight
	// actDrain drains the node under the policy (Timeout bounds it).
	ActDrain
	// actSwap replaces Target's pod on the node the Swap way and waits for
	// the new one Ready (Timeout bounds it).
	ActSwap
	// actWaitReady waits for every target Ready on its newest revision.
	ActWaitReady
	// actSoak waits out the soak.
	ActSoak
	// actGate judges the node.
	ActGate
	// actStop: the record cannot be resumed; the worker stops with Reason.
	ActStop
)

// SwapKindOf is how target t is swapped: ztunnel make-before-break (surge)
// unless the policy says replace; istio-cni and other targets replace.
func SwapKindOf(p model.Policy, t v1alpha1.TargetRef) model.SwapKind {
	if SwapState(t) == v1alpha1.NodeSwapZtunnel && p.ZtunnelSwap != model.SwapReplace {
		return model.SwapSurge
	}
	return model.SwapReplace
}

// Step is one decision of Next.
type Step struct {
	// State is the step: the state recorded when Record, the one the
	// worker has acted on once Act returns.
	State v1alpha1.NodeState
	// Record: persist State (the node's record, then status) before acting.
	Record bool
	// Cordon / Uncordon: the step cordons (uncordons) the node, in its
	// record's conditional patch when it has one.
	Cordon, Uncordon bool
	// StampSwap / StampSoak: the record carries the swap's (soak's) start.
	StampSwap, StampSoak bool
	Act                  stepAct
	// Target and Swap say which target actSwap swaps, and how.
	Target v1alpha1.TargetRef
	Swap   model.SwapKind
	// Timeout bounds the act, counted from the record's StepSince (the
	// persisted start of this step, or of the recorded step it follows),
	// so a restart never stretches it.
	Timeout time.Duration
	// Final: the node's steps end with this record.
	Final bool
	// ClearSwapped: the record forgets which pods the swaps deleted.
	ClearSwapped bool
	// Reason goes with the record into status.
	Reason string
	// Halt is the HaltXxx label of a Failed node: the rollout halts.
	Halt string
}

// View is what Next sees besides the record and the policy.
type View struct {
	// At is the step this worker acted on last. "" means none yet: the
	// record's step is acted on again (a resume). v1alpha1.NodePending
	// means start from the first step whatever the record says (a new
	// start, or a record only the status knows).
	At v1alpha1.NodeState
	// Failed is how the last act failed (nil: it did not).
	Failed *StepError
	// UpToDate: every target has a Ready pod on its newest revision on the
	// node. Read when aborting (it names how an aborted node ends).
	UpToDate bool
}

// Leave is why a node's steps stop short of its gate ("" = they do not):
// the node is made safe (a started swap finishes) and handed back.
type Leave string

const (
	LeaveAbort    Leave = "aborted"
	LeaveDeleting Leave = "NodeRollout deleted"
	// leaveSelector: relabelled out of spec.nodeSelector mid-rollout.
	LeaveSelector Leave = "left the nodeSelector"
	// LeaveStopped: the rollout cannot go on (model.Policy.Invalid; its
	// Valid condition says why). The node goes back Pending even when
	// swapped: it is started again, and judged, once the rollout can go on.
	LeaveStopped Leave = "stopped while the NodeRollout cannot go on (see its Valid condition)"
)

// Next decides a node's next step. It is pure.
func Next(rec Record, p model.Policy, v View, why Leave) Step {
	seq := steps(p)
	if v.Failed != nil {
		return failedStep(rec, seq, v.Failed)
	}
	if rec.Step == v1alpha1.NodeAbortCleanup && v.At != v1alpha1.NodePending {
		return abortedStep(p, v, why)
	}
	abort := why != ""
	next, resume := position(rec, p, seq, v.At)
	if next < 0 {
		return Step{Act: ActStop, Reason: fmt.Sprintf("unknown persisted step %q", rec.Step)}
	}
	if abort && (next <= indexOf(seq, v1alpha1.NodeDrain) || next > indexOf(seq, v1alpha1.NodeWaitReady)) {
		// Make the node safe: a started swap finishes (through WaitReady),
		// anything before it is skipped, and nothing after it is judged.
		return Step{State: v1alpha1.NodeAbortCleanup, Record: true, Reason: string(why)}
	}
	if next == len(seq) {
		return doneStep(rec, p, seq)
	}
	st := seq[next]
	s := stepFor(p, st)
	if resume {
		return s // the record's own step, acted on again
	}
	s.Record = !unrecorded(p, st) && !(s.Swap == model.SwapSurge && isSwap(v.At))
	switch st {
	case v1alpha1.NodeCordon:
		s.StampSwap = true
		if j := cordonsWith(p, seq, next); j >= 0 {
			// Nothing observes the API between the cordon and the first
			// swap (no drain): one patch cordons and records that swap.
			s = stepFor(p, seq[j])
			s.Record, s.Cordon, s.StampSwap = true, true, true
		}
	case v1alpha1.NodeUncordon:
		if p.Soak == 0 {
			// No soak: the gate judges right before the uncordon (which
			// cannot change what it reads), and a pass is recorded with the
			// uncordon (doneStep), one write instead of two.
			return stepFor(p, v1alpha1.NodeGate)
		}
	case v1alpha1.NodeSoak:
		s.StampSoak = true
	}
	return s
}

// position is the index in seq of the step to act on now (len(seq): past
// the gate; -1: a record Next cannot place) and whether it is the
// record's own step, resumed.
func position(rec Record, p model.Policy, seq []v1alpha1.NodeState, at v1alpha1.NodeState) (next int, resume bool) {
	switch {
	case at == v1alpha1.NodePending:
		return 0, false
	case at == "":
		switch rec.Step {
		case "", v1alpha1.NodePending, Claimed:
			return 0, false
		}
		return indexOf(seq, rec.Step), true
	}
	i := indexOf(seq, at)
	if i < 0 {
		return -1, false
	}
	for i++; i < len(seq) && noop(p, seq[i]); i++ {
	}
	return i, false
}

// stepFor is step st acted on without a record of its own.
func stepFor(p model.Policy, st v1alpha1.NodeState) Step {
	s := Step{State: st}
	switch st {
	case v1alpha1.NodePreflight:
		s.Act, s.Timeout = ActPreflight, p.Baseline
	case v1alpha1.NodeCordon:
		s.Cordon = true
	case v1alpha1.NodeDrain:
		s.Act, s.Timeout = ActDrain, p.DrainTimeout
	case v1alpha1.NodeWaitReady:
		s.Act, s.Timeout = ActWaitReady, p.SwapTimeout
	case v1alpha1.NodeUncordon:
		s.Uncordon = true
	case v1alpha1.NodeSoak:
		s.Act, s.Timeout = ActSoak, p.Soak
	case v1alpha1.NodeGate:
		s.Act = ActGate
	default:
		for _, t := range p.Targets {
			if SwapState(t) == st {
				s.Act, s.Target, s.Swap, s.Timeout = ActSwap, t, SwapKindOf(p, t), p.SwapTimeout
			}
		}
	}
	return s
}

// doneStep ends a node that passed its gate: Done (RolledBack in a
// rollback), with the uncordon when the gate judged before it (no soak).
func doneStep(rec Record, p model.Policy, seq []v1alpha1.NodeState) Step {
	s := Step{State: v1alpha1.NodeDone, Record: true, Final: true, ClearSwapped: true, Uncordon: !uncordoned(rec, seq)}
	if p.Rollback {
		s.State = v1alpha1.NodeRolledBack
	}
	return s
}

// abortedStep ends a node made safe (after an abort, the rollout's
// deletion, or the node leaving the selector), uncordoned in the same
// patch: Pending when it was not swapped; when it was, Done (not gated), or
// Skipped for a node the rollout no longer selects, or Pending for a
// rollout that cannot go on (LeaveStopped). In a rollback "swapped"
// means back on the restored revision (RolledBack); a node stopped before
// its swap back is Pending, still on the revision the rollout moved it to.
// A cleanup resumed after its cause went away (abort withdrawn) still ends
// as an abort.
func abortedStep(p model.Policy, v View, why Leave) Step {
	if why == "" {
		why = LeaveAbort
	}
	s := Step{State: v1alpha1.NodePending, Record: true, Final: true, ClearSwapped: true, Uncordon: true, Reason: string(why) + " before the swap"}
	switch {
	case p.Rollback && v.UpToDate:
		s.State, s.Reason = v1alpha1.NodeRolledBack, ""
	case p.Rollback:
		s.Reason = string(why) + " before the swap back: still on the revision the rollout moved it to"
	case v.UpToDate && why == LeaveStopped:
		s.Reason = string(why) + " after the swap; judged when it goes on"
	case v.UpToDate && why == LeaveSelector:
		s.State, s.Reason = v1alpha1.NodeSkipped, string(why)+" after the swap; not gated"
	case v.UpToDate:
		s.State, s.Reason = v1alpha1.NodeDone, string(why)+" after the swap; not gated"
	}
	return s
}

// failedStep ends a node whose act failed. skip-node hands the node back
// and skips it; a halt fails it and halts the rollout, handing the node
// back only when nothing was swapped (preflight, a PDB-blocked drain) or
// the gate failed before its uncordon (no soak). A node whose swap failed
// stays cordoned for a person to look at.
func failedStep(rec Record, seq []v1alpha1.NodeState, se *StepError) Step {
	if se.Skip {
		return Step{State: v1alpha1.NodeSkipped, Record: true, Final: true, ClearSwapped: true, Uncordon: true, Reason: se.Reason}
	}
	handBack := se.Halt == HaltPDBBlocked || se.Halt == HaltPreflightFailed || (se.Halt == HaltGateFailed && !uncordoned(rec, seq))
	return Step{State: v1alpha1.NodeFailed, Record: true, Final: true, Uncordon: handBack, Reason: se.Reason, Halt: se.Halt}
}

// uncordoned says the record is at or past the uncordon.
func uncordoned(rec Record, seq []v1alpha1.NodeState) bool {
	i := indexOf(seq, rec.Step)
	return i >= 0 && i >= indexOf(seq, v1alpha1.NodeUncordon)
}

// SwapState names the step that swaps target t.
// Its kind is filled in by model.TypeTargets, never guessed from the name.
func SwapState(t v1alpha1.TargetRef) v1alpha1.NodeState {
	kind := t.Kind
	if kind == "" { // not typed yet (a plan, a test): only the default targets' exact names
		for _, d := range model.DefaultTargets {
			if d.Namespace == t.Namespace && d.Name == t.Name {
				kind = d.Kind
			}
		}
	}
	switch kind {
	case v1alpha1.TargetCNI:
		return v1alpha1.NodeSwapCNI
	case v1alpha1.TargetZtunnel:
		return v1alpha1.NodeSwapZtunnel
	}
	return v1alpha1.NodeState("Swap/" + t.Namespace + "/" + t.Name)
}

// steps is the per-node sequence for a policy: one swap step per target.
func steps(p model.Policy) []v1alpha1.NodeState {
	s := []v1alpha1.NodeState{v1alpha1.NodePreflight, v1alpha1.NodeCordon, v1alpha1.NodeDrain}
	for _, t := range p.Targets {
		s = append(s, SwapState(t))
	}
	return append(s, v1alpha1.NodeWaitReady, v1alpha1.NodeUncordon, v1alpha1.NodeSoak, v1alpha1.NodeGate)
}

// A surge swap right after another swap gets no record of its own either:
// nothing it carries is not in the record before it (the swap's record,
// with the old pods of both), and a successor resumes it from that record,
// the earlier swap acted on again (its old pod long gone: a wait for Ready
// that returns at once), then the surge swap, which derives every step
// from the pods on the node (swap/surge.go). Its timeout counts from its
// bridge's creation (a name the node and revision decide, so a successor
// finds it), or before there is one from the record before it
// (surgeDeadline): neither moves with a restart. The status entry shows
// the step all the same (showStep). That spares one node write per node.
//
// unrecorded steps only observe (wait for Ready, judge, preflight checks
// with no baseline window to wait out): they get no record of their own. A
// successor repeats the observation from the record before it (none, the
// last swap, or the soak), and the next step's record (Cordon, Uncordon, Done
// or Failed with the verdict) says it passed. Preflight with a baseline is
// recorded: the baseline window counts from its record, across a restart.
func unrecorded(p model.Policy, st v1alpha1.NodeState) bool {
	return st == v1alpha1.NodeWaitReady || st == v1alpha1.NodeGate || (st == v1alpha1.NodePreflight && p.Baseline == 0)
}

// cordonsWith is the index of the step whose record the cordon's patch
// carries instead of its own (the first swap, when every step between them
// is a noop: no drain), or -1.
func cordonsWith(p model.Policy, seq []v1alpha1.NodeState, cordon int) int {
	for i := cordon + 1; i < len(seq); i++ {
		switch {
		case noop(p, seq[i]):
			continue
		case isSwap(seq[i]):
			return i
		}
		return -1
	}
	return -1
}

// SwapsRecordedWith are the targets whose old pods swap step st's record
// names: its own, and the surge swaps right after it, which have no record
// of their own (Next).
func SwapsRecordedWith(p model.Policy, st v1alpha1.NodeState) []v1alpha1.TargetRef {
	var out []v1alpha1.TargetRef
	for i, t := range p.Targets {
		if SwapState(t) != st {
			continue
		}
		out = append(out, t)
		for _, u := range p.Targets[i+1:] {
			if SwapKindOf(p, u) != model.SwapSurge {
				break
			}
			out = append(out, u)
		}
		break
	}
	return out
}

func isSwap(st v1alpha1.NodeState) bool {
	return st == v1alpha1.NodeSwapCNI || st == v1alpha1.NodeSwapZtunnel || strings.HasPrefix(string(st), "Swap/")
}

// noop steps do nothing under this policy: no drain, or a zero soak.
func noop(p model.Policy, st v1alpha1.NodeState) bool {
	return (st == v1alpha1.NodeDrain && p.Drain == v1alpha1.DrainNever) || (st == v1alpha1.NodeSoak && p.Soak == 0)
}

func indexOf(seq []v1alpha1.NodeState, s v1alpha1.NodeState) int {
	for i, x := range seq {
		if x == s {
			return i
		}
	}
	return -1
}

// Halt reasons (bounded label values of nodewise_rollout_halts_total).
const (
	HaltGateFailed      = "gate_failed"
	HaltSwapTimeout     = "swap_timeout"
	HaltSwapFailed      = "swap_failed" // the API refused a swap's write, or the kubelet rejected the new pod
	HaltPDBBlocked      = "pdb_blocked"
	HaltDrainFailed     = "drain_failed"
	HaltPreflightFailed = "preflight_failed"
)

// StepError ends a node's steps with a halt (or a skip) and a reason.
type StepError struct {
	Halt   string // a HaltXxx metric label
	Reason string
	Skip   bool // skip the node instead of halting the rollout
}

func (s *StepError) Error() string { return s.Reason }

func Halt(kind, format string, args ...any) error {
	return &StepError{Halt: kind, Reason: fmt.Sprintf(format, args...)}
}
