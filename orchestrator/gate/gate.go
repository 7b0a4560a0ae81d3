// Package gate is the orchestrator's port to what judges a node (Gate, with
// Base for what a gate has no use for), and the gate it uses when no judge
// is wired in (ReadinessGate).
package gate

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/observe"
)

// GateInput is what a gate judges: one node, its soak window and the rollout's gate spec.
type GateInput struct {
	Node          string
	BaselineStart time.Time // start of the baseline window (before the swap)
	SwapStart     time.Time
	SoakStart     time.Time // the node was uncordoned on the new revision
	Now           time.Time
	Spec          v1alpha1.GatesSpec
	// SwappedInPlace: ztunnel was swapped on the node without a drain (drain
	// policy never, or no finished drain recorded since the cordon), so the
	// connections older than ztunnel's drain deadline were reset as planned.
	// Read back from the node's annotations after a restart.
	SwappedInPlace bool
	// ZtunnelGrace is terminationGracePeriodSeconds of the ztunnel target's
	// pod template (default 30 s): ztunnel's drain deadline derives from it.
	ZtunnelGrace time.Duration
	// Control are the nodes the judged node is compared with (Controls, as
	// the rollout stands when the node is judged): later windows' nodes in
	// its zone, else across the cluster, still Pending, not cordoned and not
	// on the newest revision. None (the last window) judges before/after
	// alone. ControlScope says where they come from: "zone a", "the cluster
	// (zone a has none left)".
	Control      []string
	ControlScope string
	// Previous is the judgement persisted for this node during this soak
	// (status.nodes[].judgement, judged at or after SoakStart), read back
	// after a restart: a gate that judges in rounds goes on from it, so a
	// crash loop cannot reset its count of failing intervals. Nil when none.
	Previous *v1alpha1.NodeJudgement
	// Progress persists an Inconclusive round's verdict (its Summary is the
	// next Previous). Nil: nothing to persist to.
	Progress func(ctx context.Context, v health.Verdict) error
	// Record is what Keep returned for this node in this attempt
	// (status.nodes[].baseline), read back after a restart: a gate whose own
	// samples lack the node's baseline judges from it. "" when none.
	Record string
	// Controls is Keep's record of the control nodes' samples
	// (status.nodes[].controls), read back after a restart: a gate whose
	// own samples lack a control's baseline takes it from there. "" none.
	Controls string
	// Soak is the policy's soak length: the sequential judge spreads its
	// looks over it and says when a decision was taken.
	Soak time.Duration
}

// Looker is a Gate that can fail a node while it soaks: the soak calls
// Look every health.LookEvery with the node's input (as Judge gets it) and
// how long it has soaked, and a Look that decides (true, with a Fail)
// fails the node at once, before the soak's end. A Look that does not
// decide changes nothing: passing a node is the judgement's, at the soak's
// end. The judge's sequential method implements it (docs/health.md).
type Looker interface {
	Look(ctx context.Context, in GateInput, elapsed time.Duration) (health.Verdict, bool, error)
}

// KeepInput is what Keep records: a node's baseline window (and, once
// its soak started, the soak's first sample) and what was recorded so far.
type KeepInput struct {
	Node          string
	BaselineStart time.Time
	SwapStart     time.Time
	// SoakStart is zero at the cordon (the baseline alone), else when the
	// soak started: the record then also holds the soak's first sample.
	SoakStart time.Time
	Spec      v1alpha1.GatesSpec
	// Record is the one persisted so far in this attempt ("" none): a
	// successor's gate takes the baseline back from it.
	Record string
	// Control are the node's control nodes as the rollout stands (as
	// GateInput.Control), and Controls their record persisted so far in
	// this attempt ("" none).
	Control  []string
	Controls string
}

// Kept is what Keep returns to persist: the node's record
// (status.nodes[].baseline) and its control nodes' (.controls); "" for
// either persists none.
type Kept struct {
	Baseline, Controls string
}

// PrepareInput is what Prepare needs at a node's preflight: the node, and
// the control nodes it will be judged against (Controls at preflight; the
// judgement drops those started or cordoned since), so their snapshots
// cover the same baseline.
type PrepareInput struct {
	Node    string
	Control []string
	// Baseline is the policy's baseline window: a gate that reads the
	// agents' history (Reads.History) takes that much of it back.
	Baseline time.Duration
}

// Gate is the orchestrator's port to what judges a node, over the node's
// whole judged life: prepared at its preflight, its baseline waited for
// and kept, judged after its soak, released when it leaves the rollout;
// and, for the planner, the alerts that hold every start. Embed Base for
// the methods a gate has no use for: a gate that only judges writes Judge.
type Gate interface {
	// Reads says what the gate reads from the node agents: the worker
	// runs the steps that feed each read only for a gate that makes it.
	Reads() Reads
	// Prepare is called when a node enters preflight, before its baseline
	// window, and again after a restart (it must be idempotent). Control
	// is handed only to a gate that Reads.Samples. An error halts the node.
	Prepare(ctx context.Context, in PrepareInput) error
	// CoveredSince, asked only of a gate that Reads.History, samples the
	// node now and says since when the gate holds its samples in one run
	// of its agent (zero: none). The baseline window is then the one that
	// ends at the swap, and preflight waits only for the part of it the
	// history does not cover (a new agent, a node just added, an agent
	// restarted since).
	CoveredSince(ctx context.Context, node string) time.Time
	// Keep returns what to persist for a gate whose judgement reads samples
	// taken before the swap, which a successor leader would otherwise not
	// have. The orchestrator calls it when the baseline window ends (the
	// cordon) and when the soak starts, and persists what it returns in
	// the node's status entry (status.nodes[].baseline, and the control
	// nodes' in .controls) before the step acts; both are cleared when the
	// node leaves flight. An error persists nothing: the gate then fails
	// the node closed on a handover, as without a record. A Kept without
	// Controls leaves the successor to judge the node without its control
	// group.
	Keep(ctx context.Context, in KeepInput) (Kept, error)
	// Judge decides whether a node that finished its soak may count as
	// done. An error is treated as Fail (gates fail closed). The judge in
	// package health plugs in here.
	Judge(ctx context.Context, in GateInput) (health.Verdict, error)
	// Enrollment, asked only of a gate that Reads.Enrollment, is what the
	// soak's enrollment watchdog reads while the node soaks: the node's
	// enrollment just before the swap (the last baseline sample that
	// carries one; nil when none does) and now (sampled now). record is
	// the node's persisted baseline record (status.nodes[].baseline, ""
	// none): a successor leader, which never sampled the baseline, takes
	// the enrollment before the swap back from it. An error (the agent did
	// not answer, a record that cannot be read) is no evidence either way:
	// the watchdog asks again, and the gate fails the node closed at the
	// soak's end.
	Enrollment(ctx context.Context, node string, baselineStart, swapStart time.Time, record string) (before, now *wire.Enrollment, err error)
	// Done is called when a node leaves the rollout, judged or not, and
	// releases what its Prepare took (its control nodes' samples too,
	// unless another node still needs them).
	Done(node string)
	// FiringAlerts returns the labels of every alert firing on the
	// Prometheus at address (within the gates' address policy), for
	// spec.blocking.alerts. An error holds every start (fail closed).
	FiringAlerts(ctx context.Context, address string) ([]map[string]string, error)
}

// Reads is what a gate reads from the node agents (all of it: the judge;
// none: the readiness gate).
type Reads struct {
	// Samples: the gate samples the agents from preflight on. Its Prepare
	// and Keep are handed the node's control group (reading it observes
	// every node and pod of the cache), the Judge compares with it, and
	// the agents that answer the gate are asked for istio-cni's health.
	Samples bool
	// History: the gate reads a node's baseline from its agent's history
	// (CoveredSince).
	History bool
	// Enrollment: the gate reads the agents' enrollment checks, and the
	// soak runs the enrollment watchdog (Enrollment).
	Enrollment bool
}

// ErrNoPrometheus is Base's FiringAlerts: the gate cannot reach
// Prometheus, so blocking alerts cannot be read and hold every start.
var ErrNoPrometheus = errors.New("this orchestrator's gate does not read Prometheus")

// errNoEnrollment is Base's Enrollment, never asked (Reads.Enrollment is
// false).
var errNoEnrollment = errors.New("this gate does not read the agents' enrollment")

// Base is the part of a Gate a gate that only judges has no use for, to
// embed: it reads nothing from the agents, prepares, keeps and releases
// nothing, and reads no alerts (ErrNoPrometheus).
type Base struct{}

// Reads implements Gate: nothing.
func (Base) Reads() Reads { return Reads{} }

// Prepare implements Gate: nothing to prepare.
func (Base) Prepare(context.Context, PrepareInput) error { return nil }

// CoveredSince implements Gate: no samples.
func (Base) CoveredSince(context.Context, string) time.Time { return time.Time{} }

// Keep implements Gate: nothing to persist.
func (Base) Keep(context.Context, KeepInput) (Kept, error) { return Kept{}, nil }

// Enrollment implements Gate: errNoEnrollment.
func (Base) Enrollment(context.Context, string, time.Time, time.Time, string) (*wire.Enrollment, *wire.Enrollment, error) {
	return nil, nil, errNoEnrollment
}

// Done implements Gate: nothing to release.
func (Base) Done(string) {}

// FiringAlerts implements Gate: ErrNoPrometheus.
func (Base) FiringAlerts(context.Context, string) ([]map[string]string, error) {
	return nil, ErrNoPrometheus
}

// GateFunc is a Gate that judges with judge and is Base otherwise.
func GateFunc(judge func(ctx context.Context, in GateInput) (health.Verdict, error)) Gate {
	return funcGate{judge: judge}
}

type funcGate struct {
	Base
	judge func(ctx context.Context, in GateInput) (health.Verdict, error)
}

// Judge calls the function.
func (g funcGate) Judge(ctx context.Context, in GateInput) (health.Verdict, error) {
	return g.judge(ctx, in)
}

// ReadinessGate is the default gate until the judge is wired in: the node
// and the node's target pods are Ready, and neither the node nor a pod on it
// that was there when the soak began changed its Ready condition during it
// (SoakReadiness). Everything it reads is in the API (condition transition
// times), so a successor judges the same way after a crash.
type ReadinessGate struct {
	Base
	Nodes corelisters.NodeLister
	Pods  observe.PodCache
}

// Judge implements Gate.
func (g ReadinessGate) Judge(_ context.Context, in GateInput) (health.Verdict, error) {
	r, err := SoakReadiness(g.Nodes, g.Pods, in.Node, in.SoakStart)
	if err != nil {
		return health.Verdict{}, err
	}
	if len(r.Problems) > 0 {
		return health.Verdict{Outcome: health.Fail, Headline: health.Lead(r.Problems), Reasons: append(r.Problems, ReasonNoBaseline)}, nil
	}
	// Say what was seen, and no more: the conditions as they stand at the
	// end of the soak, and their last transitions.
	return health.Verdict{Outcome: health.Pass, Headline: fmt.Sprintf("the node and its %d pods Ready through the soak", r.pods), Reasons: []string{fmt.Sprintf(
		"node and the %d pods on it Ready at %s, none with a Ready transition since the soak began at %s (pods deleted meanwhile are not seen)",
		r.pods, in.Now.UTC().Format(time.RFC3339), in.SoakStart.UTC().Format(time.RFC3339)), ReasonNoBaseline}}, nil
}

// ReasonNoBaseline is the readiness gate's reason for the baseline it
// skipped: it judges the soak's Ready conditions alone, so preflight
// waited for no baseline (Reads is empty).
const ReasonNoBaseline = "no baseline read or waited for: the readiness gate (no judge wired: the orchestrator has no --agent-ca) judges the soak's Ready conditions alone, with nothing before the swap to compare"

// readiness is what the Ready conditions of a node and its pods show of a soak.
type readiness struct {
	Problems []string // a reason for each Ready transition or not-Ready pod seen
	pods     int      // the pods judged
}

// SoakReadiness reads the Ready conditions of the node and its pods for the
// soak that began at since: the node Ready, with no Ready transition since
// (one in either direction means it was not Ready for part of the soak,
// however short: a node that went NotReady and came back has its last
// transition inside the soak); every pod that had started before it Ready
// with no transition since; a target pod that started since Ready.
func SoakReadiness(nodes corelisters.NodeLister, podCache observe.PodCache, name string, since time.Time) (readiness, error) {
	var r readiness
	node, err := nodes.Get(name)
	if err != nil {
		return r, fmt.Errorf("reading node %s: %w", name, err)
	}
	ready, changed := model.NodeReadyCondition(node)
	switch {
	case !ready:
		r.Problems = append(r.Problems, fmt.Sprintf("node %s is not Ready", name))
	case changedSince(changed, since):
		r.Problems = append(r.Problems, fmt.Sprintf("node %s's Ready condition changed during the soak (Ready again since %s)", name, changed.UTC().Format(time.RFC3339)))
	}
	pods, err := podCache.OnNode(name)
	if err != nil {
		return r, fmt.Errorf("listing pods on node %s: %w", name, err)
	}
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		r.pods++
		ready, at := model.PodReadyCondition(p)
		// A pod counts as there at soak start only once it had started: a
		// replica scheduled just before the soak and still starting has not
		// gone from Ready to not Ready (under load it was judged so).
		existed := p.Status.StartTime != nil && p.Status.StartTime.Time.Before(since)
		switch {
		case existed && !ready && at.After(since):
			r.Problems = append(r.Problems, fmt.Sprintf("pod %s/%s went not Ready during the soak (at %s)", p.Namespace, p.Name, at.UTC().Format(time.RFC3339)))
		case existed && !ready:
			r.Problems = append(r.Problems, fmt.Sprintf("pod %s/%s is not Ready, since before the soak", p.Namespace, p.Name))
		case existed && ready && at.After(since):
			r.Problems = append(r.Problems, fmt.Sprintf("pod %s/%s flapped Ready during the soak (last transition %s)", p.Namespace, p.Name, at.UTC().Format(time.RFC3339)))
		case !existed && !ready && model.IsTargetPod(p):
			r.Problems = append(r.Problems, fmt.Sprintf("pod %s/%s is not Ready", p.Namespace, p.Name))
		}
	}
	return r, nil
}

// changedSince is whether a condition's lastTransitionTime may lie at or
// after since. The API stores it in whole seconds, so a node that went
// NotReady and back within the second its soak began shows a time up to a
// second before since; a transition in since's second counts as inside the
// soak (the gate fails closed).
func changedSince(transition, since time.Time) bool {
	return !transition.Before(since.Truncate(time.Second))
}

// JudgedSince is j when it was judged at or after since (this soak's, not
// an earlier attempt's), else nil.
func JudgedSince(j *v1alpha1.NodeJudgement, since time.Time) *v1alpha1.NodeJudgement {
	if j == nil {
		return nil
	}
	at, err := time.Parse(time.RFC3339, j.JudgedAt)
	if err != nil || at.Before(since.Truncate(time.Second)) {
		return nil
	}
	return j
}
