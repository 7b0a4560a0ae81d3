package gate

import (
	"context"
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
	// Record is what a Keeper returned for this node in this attempt
	// (status.nodes[].baseline), read back after a restart: a gate whose own
	// samples lack the node's baseline judges from it. "" when none.
	Record string
	// Controls is the Keeper's record of the control nodes' samples
	// (status.nodes[].controls), read back after a restart: a gate whose
	// own samples lack a control's baseline takes it from there. "" none.
	Controls string
}

// KeepInput is what a Keeper records: a node's baseline window (and, once
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

// Kept is what a Keeper returns to persist: the node's record
// (status.nodes[].baseline) and its control nodes' (.controls); "" for
// either persists none.
type Kept struct {
	Baseline, Controls string
}

// Keeper is implemented by gates whose judgement reads samples taken before
// the swap (the judge), which a successor leader would otherwise not have.
// The orchestrator calls Keep when the baseline window ends (the cordon)
// and when the soak starts, and persists what it returns in the node's
// status entry (status.nodes[].baseline, and the control nodes' in
// .controls) before the step acts; both are cleared when the node leaves
// flight. An error persists nothing: the gate then fails the node closed
// on a handover, as without a record. A Kept without Controls leaves the
// successor to judge the node without its control group.
type Keeper interface {
	Keep(ctx context.Context, in KeepInput) (Kept, error)
}

// PrepareInput is what a Preparer needs at a node's preflight: the node,
// and the control nodes it will be judged against (Controls at preflight;
// the judgement drops those started or cordoned since), so their snapshots
// cover the same baseline.
type PrepareInput struct {
	Node    string
	Control []string
	// Baseline is the policy's baseline window: a gate that reads the
	// agents' history (Historian) takes that much of it back.
	Baseline time.Duration
}

// Historian is implemented by gates that read a node's baseline from its
// agent's history (the judge): the baseline window is the one that ends at
// the swap, and preflight waits only for the part of it the history does
// not cover (a new agent, a node just added, an agent restarted since).
type Historian interface {
	// CoveredSince samples the node now and says since when the gate holds
	// its samples in one run of its agent (zero: none).
	CoveredSince(ctx context.Context, node string) time.Time
}

// Gate decides whether a node that finished its soak may count as done. An
// error is treated as Fail (gates fail closed). The judge in package health
// plugs in here.
type Gate interface {
	Judge(ctx context.Context, in GateInput) (health.Verdict, error)
}

// Preparer is implemented by gates that sample before the swap (the judge):
// Prepare is called when a node enters preflight, before its baseline window,
// and again after a restart (it must be idempotent). An error halts the node.
type Preparer interface {
	Prepare(ctx context.Context, in PrepareInput) error
}

// Releaser is implemented by gates that hold per-node state: Done is called
// when a node leaves the rollout, judged or not, and releases what its
// Prepare took (its control nodes' samples too, unless another node still
// needs them).
type Releaser interface {
	Done(node string)
}

// Enroller is implemented by gates that read the node agents' enrollment
// checks (the judge): the soak's enrollment watchdog asks it, while the
// node soaks, for the node's enrollment just before the swap (the last
// baseline sample that carries one; nil when none does) and now (sampled
// now). record is the node's persisted baseline record (status.nodes[].
// baseline, "" none): a successor leader, which never sampled the baseline,
// takes the enrollment before the swap back from it. An error (the agent
// did not answer, a record that cannot be read) is no evidence either way:
// the watchdog asks again, and the gate fails the node closed at the soak's
// end.
type Enroller interface {
	Enrollment(ctx context.Context, node string, baselineStart, swapStart time.Time, record string) (before, now *wire.Enrollment, err error)
}

// GateFunc adapts a function to Gate.
type GateFunc func(ctx context.Context, in GateInput) (health.Verdict, error)

// Judge calls f.
func (f GateFunc) Judge(ctx context.Context, in GateInput) (health.Verdict, error) { return f(ctx, in) }

// ReadinessGate is the default gate until the judge is wired in: the node
// and the node's target pods are Ready, and neither the node nor a pod on it
// that was there when the soak began changed its Ready condition during it
// (SoakReadiness). Everything it reads is in the API (condition transition
// times), so a successor judges the same way after a crash.
type ReadinessGate struct {
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
		return health.Verdict{Outcome: health.Fail, Reasons: r.Problems}, nil
	}
	// Say what was seen, and no more: the conditions as they stand at the
	// end of the soak, and their last transitions.
	return health.Verdict{Outcome: health.Pass, Reasons: []string{fmt.Sprintf(
		"node and the %d pods on it Ready at %s, none with a Ready transition since the soak began at %s (pods deleted meanwhile are not seen)",
		r.pods, in.Now.UTC().Format(time.RFC3339), in.SoakStart.UTC().Format(time.RFC3339))}}, nil
}

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

// AlertReader is implemented by gates that reach Prometheus (the judge):
// FiringAlerts returns the labels of every alert firing on the server at
// address (within the gates' address policy), for spec.blocking.alerts. An
// error holds every start (fail closed).
type AlertReader interface {
	FiringAlerts(ctx context.Context, address string) ([]map[string]string, error)
}
