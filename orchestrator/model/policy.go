package model

import (
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/orchestrator/timewindow"
)

// Defaults for the durations a NodeRollout leaves empty.
const (
	DefaultDrainTimeout = 5 * time.Minute
	// DefaultLongLivedAfter is spec.drain.longLivedAfter's default: longer
	// than a short request, far shorter than ztunnel's drain deadline.
	DefaultLongLivedAfter = 5 * time.Second
	DefaultSwapTimeout    = 5 * time.Minute
	// DefaultBaseline and DefaultSoak are the judge's windows when the spec
	// leaves them out (an explicit 0s turns the before/after gate off). They
	// come from the cluster simulation's power figures (docs/health.md).
	DefaultBaseline = 5 * time.Minute
	DefaultSoak     = 5 * time.Minute
	// DefaultEnrollmentTimeout is spec.enrollmentTimeout's default: how
	// long after the new pods are Ready a pod enrolled before the swap may
	// go without being enrolled again (istio-cni and ztunnel re-add every
	// pod within seconds of starting).
	DefaultEnrollmentTimeout = 30 * time.Second
)

// DefaultTargets are swapped in this order when spec.targets is empty: CNI first.
var DefaultTargets = []v1alpha1.TargetRef{
	{Namespace: istio.DefaultNamespace, Name: "istio-cni-node", Kind: v1alpha1.TargetCNI},
	{Namespace: istio.DefaultNamespace, Name: "ztunnel", Kind: v1alpha1.TargetZtunnel},
}

// Policy is a NodeRollout spec with defaults filled in and parsed, ready for the planner.
type Policy struct {
	Targets        []v1alpha1.TargetRef
	Selector       labels.Selector
	Canaries       []string
	MaxParallel    Limit
	MaxUnavailable Limit
	Drain          v1alpha1.DrainPolicy
	DrainTimeout   time.Duration
	LongLivedAfter time.Duration
	PDBBlocked     v1alpha1.PDBBlockedPolicy
	SwapTimeout    time.Duration
	Baseline       time.Duration
	Soak           time.Duration
	// EnrollmentTimeout bounds the soak's enrollment watchdog (the worker's
	// watchEnrollment), counted from the soak's start.
	EnrollmentTimeout time.Duration
	// NoControlGroup: spec.gates.controlGroup is Disabled, so no node gets
	// control nodes (Controls) and each is judged before/after alone.
	NoControlGroup bool
	// FixedDecision: spec.gates.method is Fixed (the default), so the judge
	// first decides at the soak's end; else it looks during the soak
	// (Sequential).
	FixedDecision bool
	Windows       []timewindow.Window
	Paused        bool
	Abort         bool
	Rollback      bool
	// ZtunnelSwap is how ztunnel targets are swapped: SwapSurge (empty
	// means it) or SwapReplace. It is the orchestrator's (Config.ZtunnelSwap),
	// not the NodeRollout's.
	ZtunnelSwap SwapKind

	// Blackouts and NotBefore hold every start, whatever the windows say.
	Blackouts []timewindow.Blackout
	NotBefore time.Time
	// CountOthers: nodes unavailable through other maintenance count
	// against MaxUnavailable (spec.coordination.countOthers, default true).
	CountOthers bool
	// Prepull: pull each node's new images before its start (spec.prepull).
	Prepull bool
	// NotReadyTimeout: a node NotReady longer than this before its turn is
	// Skipped (spec.notReadyTimeout; 0: it waits until Ready again).
	NotReadyTimeout time.Duration
	// Opportunistic: a node another tool already cordoned and drained goes
	// first, after the canaries (spec.coordination.opportunistic).
	Opportunistic bool
	// TakeKuredLock: hold Kured's lock while a node is in flight
	// (spec.coordination.kuredLock take, the default; honour: false).
	TakeKuredLock bool
	// Version: the Istio version every target image must carry
	// (spec.version), "" for any.
	Version string
	// Blocking: pods and alerts that hold starts (spec.blocking, read by fleet.Observer).
	Blocking Blocking
	// Invalid says why the rollout cannot go on (a spec the orchestrator
	// cannot follow, or another rollout that selects its nodes goes first),
	// "" when it can. Then no node starts, and each node in flight is made
	// safe: a started swap finishes, nothing is judged, the node is handed
	// back Pending (nodestep.LeaveStopped). The rest of the policy is what
	// could be read of the spec.
	Invalid string
}

// MustPolicy is NewPolicy for a spec known to be valid (tests, literals):
// it panics on an error.
func MustPolicy(spec v1alpha1.NodeRolloutSpec) Policy {
	p, err := NewPolicy(spec)
	if err != nil {
		panic(err)
	}
	return p
}

// NewPolicy validates a spec the way the CRD does, plus what CEL cannot check
// (time zones, label selector syntax), and fills in defaults. Every problem is
// returned, joined, each naming its field.
func NewPolicy(spec v1alpha1.NodeRolloutSpec) (Policy, error) {
	var errs []error
	p := Policy{
		Targets:           spec.Targets,
		Canaries:          spec.CanaryNodes,
		Drain:             spec.Drain.Policy,
		PDBBlocked:        spec.Drain.PDBBlocked,
		DrainTimeout:      durationOr(spec.Drain.Timeout, DefaultDrainTimeout),
		LongLivedAfter:    durationOr(spec.Drain.LongLivedAfter, DefaultLongLivedAfter),
		SwapTimeout:       durationOr(spec.SwapTimeout, DefaultSwapTimeout),
		Baseline:          durationOr(spec.Baseline, DefaultBaseline),
		Soak:              durationOr(spec.Soak, DefaultSoak),
		EnrollmentTimeout: durationOr(spec.EnrollmentTimeout, DefaultEnrollmentTimeout),
		NoControlGroup:    spec.Gates.ControlGroup == v1alpha1.ControlGroupDisabled,
		FixedDecision:     spec.Gates.Method != v1alpha1.MethodSequential,
		Paused:            spec.Paused,
		Version:           spec.Version,
		Abort:             spec.Abort,
		Rollback:          spec.Rollback,
		Selector:          labels.Everything(),
	}
	errs = append(errs, badDurations(spec)...)
	if len(p.Targets) == 0 {
		p.Targets = DefaultTargets
	}
	seen := map[string]bool{}
	for i, t := range p.Targets {
		if t.Namespace == "" || t.Name == "" {
			errs = append(errs, fmt.Errorf("spec.targets[%d]: namespace and name are required", i))
		}
		if seen[t.Namespace+"/"+t.Name] {
			errs = append(errs, fmt.Errorf("spec.targets[%d]: %s/%s is listed twice", i, t.Namespace, t.Name))
		}
		seen[t.Namespace+"/"+t.Name] = true
	}
	var err error
	if p.MaxParallel, err = parseLimit("spec.maxParallel", spec.MaxParallel); err != nil {
		errs = append(errs, err)
	}
	if p.MaxUnavailable, err = parseLimit("spec.maxUnavailable", spec.MaxUnavailable); err != nil {
		errs = append(errs, err)
	}
	if p.Drain == "" {
		p.Drain = v1alpha1.DrainNever
	}
	switch p.Drain {
	case v1alpha1.DrainNever, v1alpha1.DrainAlways, v1alpha1.DrainAuto:
	default:
		errs = append(errs, fmt.Errorf("spec.drain.policy: %q is not one of never, always, auto", p.Drain))
	}
	if p.PDBBlocked == "" {
		p.PDBBlocked = v1alpha1.PDBHalt
	}
	switch p.PDBBlocked {
	case v1alpha1.PDBWait, v1alpha1.PDBSkipNode, v1alpha1.PDBHalt:
	default:
		errs = append(errs, fmt.Errorf("spec.drain.pdbBlocked: %q is not one of wait, skip-node, halt", p.PDBBlocked))
	}
	for name, d := range map[string]time.Duration{"spec.drain.timeout": p.DrainTimeout, "spec.swapTimeout": p.SwapTimeout, "spec.baseline": p.Baseline, "spec.soak": p.Soak} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s: %s must not be negative", name, d))
		}
	}
	if spec.Drain.Timeout != nil && spec.Drain.Timeout.Err() == nil && p.DrainTimeout == 0 {
		errs = append(errs, errors.New("spec.drain.timeout: must be positive (0 would wait forever); use pdbBlocked: wait to wait for a budget"))
	}
	if p.LongLivedAfter <= 0 {
		errs = append(errs, fmt.Errorf("spec.drain.longLivedAfter: %s must be positive", p.LongLivedAfter))
	}
	if p.SwapTimeout == 0 {
		errs = append(errs, errors.New("spec.swapTimeout: must be positive"))
	}
	if spec.EnrollmentTimeout != nil && spec.EnrollmentTimeout.Err() == nil && p.EnrollmentTimeout <= 0 {
		errs = append(errs, fmt.Errorf("spec.enrollmentTimeout: %s must be positive, such as 30s", p.EnrollmentTimeout))
	}
	if spec.Standing && spec.Version != "" {
		errs = append(errs, errors.New("spec.standing and spec.version are exclusive: a standing policy rolls each new revision as it appears, a pinned rollout only its one version"))
	}
	if spec.Standing && spec.Rollback {
		errs = append(errs, errors.New("spec.rollback is for one-shot rollouts: a standing policy rolls a restored template as its next run"))
	}
	switch spec.Gates.ControlGroup {
	case "", v1alpha1.ControlGroupEnabled, v1alpha1.ControlGroupDisabled:
	default:
		errs = append(errs, fmt.Errorf("spec.gates.controlGroup: %q is not one of Enabled, Disabled", spec.Gates.ControlGroup))
	}
	if spec.NodeSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(spec.NodeSelector)
		if err != nil {
			errs = append(errs, fmt.Errorf("spec.nodeSelector: %w", err))
		} else {
			p.Selector = sel
		}
	}
	for i, w := range spec.MaintenanceWindows {
		win, err := timewindow.ParseWindow(w)
		if err != nil {
			errs = append(errs, fmt.Errorf("spec.maintenanceWindows[%d]: %w", i, err))
			continue
		}
		p.Windows = append(p.Windows, win)
	}
	for i, b := range spec.Blackouts {
		bo, err := timewindow.ParseBlackout(b)
		if err != nil {
			errs = append(errs, fmt.Errorf("spec.blackouts[%d]: %w", i, err))
			continue
		}
		p.Blackouts = append(p.Blackouts, bo)
	}
	p.CountOthers = spec.Coordination.CountOthers == nil || *spec.Coordination.CountOthers
	p.Prepull = spec.Prepull
	p.Opportunistic = spec.Coordination.Opportunistic
	switch spec.Coordination.KuredLock {
	case "", v1alpha1.KuredLockTake:
		p.TakeKuredLock = true
	case v1alpha1.KuredLockHonour:
	default:
		errs = append(errs, fmt.Errorf("spec.coordination.kuredLock: %q is not take or honour", spec.Coordination.KuredLock))
	}
	p.NotReadyTimeout = durationOr(spec.NotReadyTimeout, 0)
	if spec.NotReadyTimeout != nil && spec.NotReadyTimeout.Err() == nil && p.NotReadyTimeout <= 0 {
		errs = append(errs, errors.New("spec.notReadyTimeout: must be positive (leave it out to wait for a NotReady node forever)"))
	}
	var berrs []error
	p.Blocking, berrs = parseBlocking(spec.Blocking)
	errs = append(errs, berrs...)
	if spec.NotBefore != nil {
		p.NotBefore = spec.NotBefore.Time
	}
	return p, errors.Join(errs...)
}

// ValidateRaw checks what defaulting would hide: an explicit maxParallel or
// maxUnavailable of 0 in a file the CLI read (the API server rejects those
// through the CRD minimum, since its defaulting applies only to absent fields).
func ValidateRaw(raw map[string]any) error {
	spec, _ := raw["spec"].(map[string]any)
	var errs []error
	for _, f := range []string{"maxParallel", "maxUnavailable"} {
		if v, ok := spec[f]; ok {
			if n, ok := v.(float64); ok && n < 1 {
				errs = append(errs, fmt.Errorf("spec.%s: %v must be at least 1", f, n))
			}
		}
	}
	return errors.Join(errs...)
}

// badDurations names every duration field whose value as written is not a
// duration (an object the CRD did not check, e.g. written under an older one).
func badDurations(spec v1alpha1.NodeRolloutSpec) []error {
	type field struct {
		name string
		d    *v1alpha1.Duration
	}
	fields := []field{
		{"spec.drain.timeout", spec.Drain.Timeout},
		{"spec.drain.longLivedAfter", spec.Drain.LongLivedAfter},
		{"spec.swapTimeout", spec.SwapTimeout},
		{"spec.baseline", spec.Baseline},
		{"spec.soak", spec.Soak},
		{"spec.enrollmentTimeout", spec.EnrollmentTimeout},
		{"spec.notReadyTimeout", spec.NotReadyTimeout},
		{"spec.gates.interval", spec.Gates.Interval},
		{"spec.gates.maxSnapshotAge", spec.Gates.MaxSnapshotAge},
	}
	for _, l := range spec.Gates.Latency {
		fields = append(fields, field{fmt.Sprintf("spec.gates.latency[%s].minIncrease", l.Metric), l.MinIncrease})
	}
	if pg := spec.Gates.Prometheus; pg != nil {
		fields = append(fields, field{"spec.gates.prometheus.timeout", pg.Timeout})
	}
	var errs []error
	for _, f := range fields {
		if err := f.d.Err(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.name, err))
		}
	}
	return errs
}

func durationOr(d *v1alpha1.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.Duration
}

// SwapKind is how a target's pod is replaced on a node.
type SwapKind string

const (
	// SwapSurge is make-before-break: the new pod is Ready beside the old one
	// before the old one goes (ztunnel's default).
	SwapSurge SwapKind = "surge"
	// SwapReplace is break-before-make: nodewise deletes the old pod and the
	// DaemonSet controller recreates it (istio-cni's: two agents on one node
	// would share one socket path).
	SwapReplace SwapKind = "replace"
)
