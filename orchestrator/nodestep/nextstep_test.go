package nodestep

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// describe is a step in one line, for tables: the state, then what the
// step does ("record" when it persists the state first).
func describe(s Step) string {
	if s.Act == ActStop {
		return "stop: " + s.Reason
	}
	parts := []string{string(s.State)}
	flag := func(on bool, name string) {
		if on {
			parts = append(parts, name)
		}
	}
	flag(s.Record, "record")
	flag(s.Cordon, "cordon")
	flag(s.Uncordon, "uncordon")
	flag(s.StampSwap, "swap-since")
	flag(s.StampSoak, "soak-since")
	switch s.Act {
	case ActPreflight:
		parts = append(parts, "preflight")
	case ActDrain:
		parts = append(parts, "drain")
	case ActSwap:
		parts = append(parts, fmt.Sprintf("%s %s", s.Swap, s.Target.Name))
	case ActWaitReady:
		parts = append(parts, "wait-ready")
	case ActSoak:
		parts = append(parts, "soak")
	case ActGate:
		parts = append(parts, "gate")
	}
	if s.Timeout > 0 {
		parts = append(parts, "≤"+s.Timeout.String())
	}
	flag(s.Final, "final")
	flag(s.ClearSwapped, "forget-swaps")
	if s.Halt != "" {
		parts = append(parts, "halt="+s.Halt)
	}
	if s.Reason != "" {
		parts = append(parts, fmt.Sprintf("%q", s.Reason))
	}
	return strings.Join(parts, " ")
}

func dur(d time.Duration) *v1alpha1.Duration { return &v1alpha1.Duration{Duration: d} }

// Spec shapes the tables use.
var (
	plain  = func(*v1alpha1.NodeRolloutSpec) {} // drain never, no baseline, no soak
	soaked = func(s *v1alpha1.NodeRolloutSpec) {
		s.Drain.Policy, s.Baseline, s.Soak = v1alpha1.DrainAlways, dur(time.Second), dur(time.Minute)
	}
	drained  = func(s *v1alpha1.NodeRolloutSpec) { s.Drain.Policy = v1alpha1.DrainAlways }
	rollback = func(s *v1alpha1.NodeRolloutSpec) { soaked(s); s.Rollback = true }
)

// walk drives Next the way the worker does, with every act passing
// except where fail says, and returns the steps in order. A record makes
// its state the record's step, as persist does.
func walk(t *testing.T, p model.Policy, rec Record, v View, abort func(i int) Leave, fail map[v1alpha1.NodeState]*StepError) []string {
	t.Helper()
	var out []string
	for i := 0; i < 30; i++ {
		s := Next(rec, p, v, abort(i))
		out = append(out, describe(s))
		if s.Final || s.Act == ActStop {
			return out
		}
		if s.Record {
			rec.Step = s.State
		}
		v = View{At: s.State, Failed: fail[s.State], UpToDate: v.UpToDate}
	}
	t.Fatalf("no final step after 30: %v", out)
	return nil
}

func never(int) Leave  { return "" }
func always(int) Leave { return LeaveAbort }

// TestNextStepWalks walks whole nodes, from a fresh start and from every
// record a successor can resume, through each transition, halt, skip and
// abort branch.
func TestNextStepWalks(t *testing.T) {
	pdb := &StepError{Halt: HaltPDBBlocked, Reason: "drain blocked by a PodDisruptionBudget: x", Skip: true}
	cases := []struct {
		name  string
		spec  func(*v1alpha1.NodeRolloutSpec)
		rec   v1alpha1.NodeState // the record's step ("" = none)
		at    v1alpha1.NodeState // View.At at the start
		abort func(i int) Leave
		fail  map[v1alpha1.NodeState]*StepError
		up    bool // the node is on the newest revisions (read when aborting)
		want  []string
	}{
		{
			name: "no drain, no baseline, no soak: the cordon records the first swap; the gate's pass is recorded with the uncordon",
			spec: plain, at: v1alpha1.NodePending, abort: never,
			want: []string{
				"Preflight preflight",
				"SwapCNI record cordon swap-since replace istio-cni-node ≤5m0s",
				"SwapZtunnel surge ztunnel ≤5m0s",
				"WaitReady wait-ready ≤5m0s",
				"Gate gate",
				"Done record uncordon final forget-swaps",
			},
		},
		{
			name: "drain, baseline and soak: every step recorded but WaitReady, Gate and the surge swap after a swap",
			spec: soaked, at: v1alpha1.NodePending, abort: never,
			want: []string{
				"Preflight record preflight ≤1s",
				"Cordon record cordon swap-since",
				"Drain record drain ≤5m0s",
				"SwapCNI record replace istio-cni-node ≤5m0s",
				"SwapZtunnel surge ztunnel ≤5m0s",
				"WaitReady wait-ready ≤5m0s",
				"Uncordon record uncordon",
				"Soak record soak-since soak ≤1m0s",
				"Gate gate",
				"Done record final forget-swaps",
			},
		},
		{
			name: "drain without a soak: the gate judges before the uncordon",
			spec: drained, at: v1alpha1.NodePending, abort: never,
			want: []string{
				"Preflight preflight",
				"Cordon record cordon swap-since",
				"Drain record drain ≤5m0s",
				"SwapCNI record replace istio-cni-node ≤5m0s",
				"SwapZtunnel surge ztunnel ≤5m0s",
				"WaitReady wait-ready ≤5m0s",
				"Gate gate",
				"Done record uncordon final forget-swaps",
			},
		},
		{
			name: "resume SwapCNI, the ztunnel swap perhaps under way: the CNI swap acts again, then the surge swap, from the pods",
			spec: plain, rec: v1alpha1.NodeSwapCNI, abort: never,
			want: []string{
				"SwapCNI replace istio-cni-node ≤5m0s",
				"SwapZtunnel surge ztunnel ≤5m0s",
				"WaitReady wait-ready ≤5m0s",
				"Gate gate",
				"Done record uncordon final forget-swaps",
			},
		},
		{
			name: "rollback ends RolledBack",
			spec: rollback, rec: v1alpha1.NodeDone, at: v1alpha1.NodePending, abort: never,
			want: []string{
				"Preflight record preflight ≤1s",
				"Cordon record cordon swap-since",
				"Drain record drain ≤5m0s",
				"SwapCNI record replace istio-cni-node ≤5m0s",
				"SwapZtunnel surge ztunnel ≤5m0s",
				"WaitReady wait-ready ≤5m0s",
				"Uncordon record uncordon",
				"Soak record soak-since soak ≤1m0s",
				"Gate gate",
				"RolledBack record final forget-swaps",
			},
		},
		// Resume: the record's own step acts again, without a new record.
		{
			name: "resume Preflight: the baseline window counts from its record",
			spec: soaked, rec: v1alpha1.NodePreflight, abort: never,
			want: []string{
				"Preflight preflight ≤1s",
				"Cordon record cordon swap-since",
				"Drain record drain ≤5m0s",
				"SwapCNI record replace istio-cni-node ≤5m0s",
				"SwapZtunnel surge ztunnel ≤5m0s",
				"WaitReady wait-ready ≤5m0s",
				"Uncordon record uncordon",
				"Soak record soak-since soak ≤1m0s",
				"Gate gate",
				"Done record final forget-swaps",
			},
		},
		{
			name: "resume Cordon: cordons again, then the drain gets its own record",
			spec: drained, rec: v1alpha1.NodeCordon, abort: never,
			want: []string{
				"Cordon cordon",
				"Drain record drain ≤5m0s",
				"SwapCNI record replace istio-cni-node ≤5m0s",
				"SwapZtunnel surge ztunnel ≤5m0s",
				"WaitReady wait-ready ≤5m0s",
				"Gate gate",
				"Done record uncordon final forget-swaps",
			},
		},
		{
			name: "resume Drain under a policy that no longer drains: the drain acts (and does nothing)",
			spec: plain, rec: v1alpha1.NodeDrain, abort: never,
			want: []string{
				"Drain drain ≤5m0s",
				"SwapCNI record replace istio-cni-node ≤5m0s",
				"SwapZtunnel surge ztunnel ≤5m0s",
				"WaitReady wait-ready ≤5m0s",
				"Gate gate",
				"Done record uncordon final forget-swaps",
			},
		},
		{
			name: "resume a swap: the swap acts again (its UID precondition never deletes twice)",
			spec: plain, rec: v1alpha1.NodeSwapZtunnel, abort: never,
			want: []string{
				"SwapZtunnel surge ztunnel ≤5m0s",
				"WaitReady wait-ready ≤5m0s",
				"Gate gate",
				"Done record uncordon final forget-swaps",
			},
		},
		{
			name: "resume Uncordon without a soak: uncordons again, then judges; Done needs no second uncordon",
			spec: plain, rec: v1alpha1.NodeUncordon, abort: never,
			want: []string{
				"Uncordon uncordon",
				"Gate gate",
				"Done record final forget-swaps",
			},
		},
		{
			name: "resume Soak: the soak counts from its record",
			spec: soaked, rec: v1alpha1.NodeSoak, abort: never,
			want: []string{
				"Soak soak ≤1m0s",
				"Gate gate",
				"Done record final forget-swaps",
			},
		},
		{
			name: "resume a retried node (record Pending): starts over",
			spec: soaked, rec: v1alpha1.NodePending, abort: never,
			want: []string{
				"Preflight record preflight ≤1s",
				"Cordon record cordon swap-since",
				"Drain record drain ≤5m0s",
				"SwapCNI record replace istio-cni-node ≤5m0s",
				"SwapZtunnel surge ztunnel ≤5m0s",
				"WaitReady wait-ready ≤5m0s",
				"Uncordon record uncordon",
				"Soak record soak-since soak ≤1m0s",
				"Gate gate",
				"Done record final forget-swaps",
			},
		},
		{
			name: "an unknown record stops the worker",
			spec: plain, rec: "Frobnicate", abort: never,
			want: []string{`stop: unknown persisted step "Frobnicate"`},
		},
		// Halts and skips.
		{
			name: "preflight fails: halt, hand the node back",
			spec: soaked, at: v1alpha1.NodePending, abort: never,
			fail: map[v1alpha1.NodeState]*StepError{v1alpha1.NodePreflight: {Halt: HaltPreflightFailed, Reason: "preflight: node is not Ready"}},
			want: []string{
				"Preflight record preflight ≤1s",
				`Failed record uncordon final halt=preflight_failed "preflight: node is not Ready"`,
			},
		},
		{
			name: "a PDB blocks the drain under skip-node: skip, hand the node back",
			spec: soaked, at: v1alpha1.NodePending, abort: never,
			fail: map[v1alpha1.NodeState]*StepError{v1alpha1.NodeDrain: pdb},
			want: []string{
				"Preflight record preflight ≤1s",
				"Cordon record cordon swap-since",
				"Drain record drain ≤5m0s",
				`Skipped record uncordon final forget-swaps "drain blocked by a PodDisruptionBudget: x"`,
			},
		},
		{
			name: "a PDB blocks the drain under halt: halt, hand the node back",
			spec: soaked, rec: v1alpha1.NodeDrain, abort: never,
			fail: map[v1alpha1.NodeState]*StepError{v1alpha1.NodeDrain: {Halt: HaltPDBBlocked, Reason: "blocked"}},
			want: []string{
				"Drain drain ≤5m0s",
				`Failed record uncordon final halt=pdb_blocked "blocked"`,
			},
		},
		{
			name: "a drain fails otherwise: halt, the node stays cordoned",
			spec: soaked, rec: v1alpha1.NodeDrain, abort: never,
			fail: map[v1alpha1.NodeState]*StepError{v1alpha1.NodeDrain: {Halt: HaltDrainFailed, Reason: "drain: boom"}},
			want: []string{
				"Drain drain ≤5m0s",
				`Failed record final halt=drain_failed "drain: boom"`,
			},
		},
		{
			name: "a swap times out: halt, the node stays cordoned",
			spec: plain, rec: v1alpha1.NodeSwapZtunnel, abort: never,
			fail: map[v1alpha1.NodeState]*StepError{v1alpha1.NodeWaitReady: {Halt: HaltSwapTimeout, Reason: "not Ready"}},
			want: []string{
				"SwapZtunnel surge ztunnel ≤5m0s",
				"WaitReady wait-ready ≤5m0s",
				`Failed record final halt=swap_timeout "not Ready"`,
			},
		},
		{
			name: "the gate fails after the soak: halt (the node is uncordoned already)",
			spec: soaked, rec: v1alpha1.NodeSoak, abort: never,
			fail: map[v1alpha1.NodeState]*StepError{v1alpha1.NodeGate: {Halt: HaltGateFailed, Reason: "gate Fail: x"}},
			want: []string{
				"Soak soak ≤1m0s",
				"Gate gate",
				`Failed record final halt=gate_failed "gate Fail: x"`,
			},
		},
		{
			name: "the gate fails without a soak: halt, uncordoned in the same patch",
			spec: plain, rec: v1alpha1.NodeSwapZtunnel, abort: never,
			fail: map[v1alpha1.NodeState]*StepError{v1alpha1.NodeGate: {Halt: HaltGateFailed, Reason: "gate Fail: x"}},
			want: []string{
				"SwapZtunnel surge ztunnel ≤5m0s",
				"WaitReady wait-ready ≤5m0s",
				"Gate gate",
				`Failed record uncordon final halt=gate_failed "gate Fail: x"`,
			},
		},
		// Abort.
		{
			name: "abort before anything: made safe, back to Pending",
			spec: soaked, at: v1alpha1.NodePending, abort: always,
			want: []string{
				`AbortCleanup record "aborted"`,
				`Pending record uncordon final forget-swaps "aborted before the swap"`,
			},
		},
		{
			name: "abort during the drain: made safe, back to Pending",
			spec: soaked, rec: v1alpha1.NodeDrain, abort: always,
			want: []string{
				`AbortCleanup record "aborted"`,
				`Pending record uncordon final forget-swaps "aborted before the swap"`,
			},
		},
		{
			name: "abort during a swap: the swap and WaitReady finish, then made safe, Done without a gate",
			spec: soaked, rec: v1alpha1.NodeSwapCNI, abort: always, up: true,
			want: []string{
				"SwapCNI replace istio-cni-node ≤5m0s",
				"SwapZtunnel surge ztunnel ≤5m0s",
				"WaitReady wait-ready ≤5m0s",
				`AbortCleanup record "aborted"`,
				`Done record uncordon final forget-swaps "aborted after the swap; not gated"`,
			},
		},
		{
			name: "abort after the first swap's record with no drain: the swap finishes",
			spec: plain, at: v1alpha1.NodePending, abort: func(i int) Leave {
				if i >= 2 {
					return LeaveAbort
				}
				return ""
			}, up: true,
			want: []string{
				"Preflight preflight",
				"SwapCNI record cordon swap-since replace istio-cni-node ≤5m0s",
				"SwapZtunnel surge ztunnel ≤5m0s",
				"WaitReady wait-ready ≤5m0s",
				`AbortCleanup record "aborted"`,
				`Done record uncordon final forget-swaps "aborted after the swap; not gated"`,
			},
		},
		{
			name: "abort during the soak: not judged",
			spec: soaked, rec: v1alpha1.NodeSoak, abort: always, up: true,
			want: []string{
				`AbortCleanup record "aborted"`,
				`Done record uncordon final forget-swaps "aborted after the swap; not gated"`,
			},
		},
		{
			name: "resume AbortCleanup: finishes the abort even if abort was withdrawn",
			spec: soaked, rec: v1alpha1.NodeAbortCleanup, abort: never,
			want: []string{
				`Pending record uncordon final forget-swaps "aborted before the swap"`,
			},
		},
		{
			name: "a node relabelled out of the selector during its drain: made safe, back to Pending",
			spec: soaked, rec: v1alpha1.NodeDrain, abort: func(int) Leave { return LeaveSelector },
			want: []string{
				`AbortCleanup record "left the nodeSelector"`,
				`Pending record uncordon final forget-swaps "left the nodeSelector before the swap"`,
			},
		},
		{
			name: "a node relabelled out of the selector during its soak: Skipped, not gated",
			spec: soaked, rec: v1alpha1.NodeSoak, abort: func(int) Leave { return LeaveSelector }, up: true,
			want: []string{
				`AbortCleanup record "left the nodeSelector"`,
				`Skipped record uncordon final forget-swaps "left the nodeSelector after the swap; not gated"`,
			},
		},
		{
			name: "a rollout that cannot go on, during a swap: the swap finishes, then made safe and back to Pending, to be judged later",
			spec: plain, rec: v1alpha1.NodeSwapZtunnel, abort: func(int) Leave { return LeaveStopped }, up: true,
			want: []string{
				"SwapZtunnel surge ztunnel ≤5m0s",
				"WaitReady wait-ready ≤5m0s",
				`AbortCleanup record "stopped while the NodeRollout cannot go on (see its Valid condition)"`,
				`Pending record uncordon final forget-swaps "stopped while the NodeRollout cannot go on (see its Valid condition) after the swap; judged when it goes on"`,
			},
		},
		{
			name: "a rollout that cannot go on, during a drain: made safe, back to Pending",
			spec: soaked, rec: v1alpha1.NodeDrain, abort: func(int) Leave { return LeaveStopped },
			want: []string{
				`AbortCleanup record "stopped while the NodeRollout cannot go on (see its Valid condition)"`,
				`Pending record uncordon final forget-swaps "stopped while the NodeRollout cannot go on (see its Valid condition) before the swap"`,
			},
		},
		{
			name: "the NodeRollout deleted during a swap: the swap finishes, then made safe",
			spec: plain, rec: v1alpha1.NodeSwapZtunnel, abort: func(int) Leave { return LeaveDeleting }, up: true,
			want: []string{
				"SwapZtunnel surge ztunnel ≤5m0s",
				"WaitReady wait-ready ≤5m0s",
				`AbortCleanup record "NodeRollout deleted"`,
				`Done record uncordon final forget-swaps "NodeRollout deleted after the swap; not gated"`,
			},
		},
		{
			name: "abort in a rollback after the swap back ends RolledBack",
			spec: rollback, rec: v1alpha1.NodeAbortCleanup, abort: always, up: true,
			want: []string{
				"RolledBack record uncordon final forget-swaps",
			},
		},
		{
			// #27 finding 4: a node aborted before its swap back was never
			// swapped: it is not RolledBack.
			name: "abort in a rollback during the drain, before the swap back: Pending, not RolledBack",
			spec: rollback, rec: v1alpha1.NodeDrain, abort: always,
			want: []string{
				`AbortCleanup record "aborted"`,
				`Pending record uncordon final forget-swaps "aborted before the swap back: still on the revision the rollout moved it to"`,
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := fixture.Policy(t, tc.spec)
			got := walk(t, p, Record{Step: tc.rec}, View{At: tc.at, UpToDate: tc.up}, tc.abort, tc.fail)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("steps:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}

// TestNextStepReplaceSwapKeepsItsRecord: only a surge swap goes without a
// record of its own; ztunnel replaced (break-before-make) has nothing else
// its timeout could count from across a restart.
func TestNextStepReplaceSwapKeepsItsRecord(t *testing.T) {
	p := fixture.Policy(t, plain)
	p.ZtunnelSwap = model.SwapReplace
	got := walk(t, p, Record{}, View{At: v1alpha1.NodePending}, never, nil)
	want := []string{
		"Preflight preflight",
		"SwapCNI record cordon swap-since replace istio-cni-node ≤5m0s",
		"SwapZtunnel record replace ztunnel ≤5m0s",
		"WaitReady wait-ready ≤5m0s",
		"Gate gate",
		"Done record uncordon final forget-swaps",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("steps:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
	if got := SwapsRecordedWith(p, v1alpha1.NodeSwapCNI); len(got) != 1 {
		t.Errorf("the CNI swap's record names the old pods of %v; want its own only", got)
	}
	if got := SwapsRecordedWith(fixture.Policy(t, plain), v1alpha1.NodeSwapCNI); len(got) != 2 || got[1].Name != "ztunnel" {
		t.Errorf("the CNI swap's record names the old pods of %v; want istio-cni-node's and ztunnel's (surged without a record)", got)
	}
}

// TestNextStepBoundsCountFromTheRecord: a step's bound is a duration the
// worker adds to the record's StepSince, so the same record gives the same
// deadline to every successor, however late it resumes.
func TestNextStepBoundsCountFromTheRecord(t *testing.T) {
	p := fixture.Policy(t, func(s *v1alpha1.NodeRolloutSpec) {
		soaked(s)
		s.Drain.Timeout, s.SwapTimeout = dur(20*time.Second), dur(time.Minute)
	})
	for _, tc := range []struct {
		rec  v1alpha1.NodeState
		want time.Duration
	}{
		{v1alpha1.NodePreflight, time.Second},
		{v1alpha1.NodeDrain, 20 * time.Second},
		{v1alpha1.NodeSwapCNI, time.Minute},
		{v1alpha1.NodeSoak, time.Minute},
	} {
		s := Next(Record{Step: tc.rec, StepSince: time.Unix(100, 0)}, p, View{}, "")
		if s.Record || s.Timeout != tc.want {
			t.Errorf("resume %s: %s, want the record's own step bounded by %s from its StepSince", tc.rec, describe(s), tc.want)
		}
	}
}

// TestSwapKindOf: ztunnel is swapped surge unless the orchestrator says
// replace; istio-cni (and any other target) always replace.
func TestSwapKindOf(t *testing.T) {
	zt := v1alpha1.TargetRef{Namespace: "istio-system", Name: "ztunnel"}
	cni := v1alpha1.TargetRef{Namespace: "istio-system", Name: "istio-cni-node"}
	for _, c := range []struct {
		p    model.Policy
		t    v1alpha1.TargetRef
		want model.SwapKind
	}{
		{model.Policy{}, zt, model.SwapSurge},
		{model.Policy{ZtunnelSwap: model.SwapSurge}, zt, model.SwapSurge},
		{model.Policy{ZtunnelSwap: model.SwapReplace}, zt, model.SwapReplace},
		{model.Policy{}, cni, model.SwapReplace},
		{model.Policy{ZtunnelSwap: model.SwapSurge}, cni, model.SwapReplace},
	} {
		if got := SwapKindOf(c.p, c.t); got != c.want {
			t.Errorf("swapKindOf(ZtunnelSwap %q, %s) = %s, want %s", c.p.ZtunnelSwap, c.t.Name, got, c.want)
		}
	}
}
