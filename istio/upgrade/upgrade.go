// Package upgrade orders a whole Istio upgrade of a mixed cluster, from the
// live inventory: per skew pass, the precheck, the new istiod revision beside
// the old, the node components (ztunnel and istio-cni, by a NodeRollout), the
// sidecar namespaces (by a RevisionMigration), the default tag, and last the
// old revision's removal, the point of no return. Each step says what it
// changes, who performs it (the user's own Helm or Git change, shown as the
// exact values, or a nodewise object to apply) and when it is done, read
// from the inventory and the nodewise objects, so one function gives both
// the plan and the status. It is pure.
package upgrade

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/istio/skew"
)

// Who performs a step.
const (
	ByYou      = "you"      // a Helm or Git change of your own
	ByNodewise = "nodewise" // a nodewise object to apply, or a nodewise command
)

// State is where a step is.
type State string

const (
	Done    State = "Done"
	Running State = "Running"
	Next    State = "Next"
	Blocked State = "Blocked" // a nodewise object of this step halted, failed or was refused
	Later   State = "Later"
)

// Step is one move of the upgrade.
type Step struct {
	Pass int    `json:"pass"`
	Name string `json:"name"`
	// Changes says what the step changes in the cluster.
	Changes string `json:"changes"`
	By      string `json:"by"`
	// Do is the exact command or Helm values a person runs.
	Do string `json:"do"`
	// Check is what must hold before the next step, and Why where it stands.
	Check string `json:"check"`
	State State  `json:"state"`
	Why   string `json:"why,omitempty"`
	// PointOfNoReturn: after it, going back means reinstalling the old
	// revision.
	PointOfNoReturn bool `json:"pointOfNoReturn,omitempty"`
	// Object is the nodewise object the step applies, if any.
	Object any `json:"object,omitempty"`
}

// Plan is the ordered upgrade and where the cluster is in it.
type Plan struct {
	To     string      `json:"to"`
	Passes []skew.Pass `json:"-"`
	Steps  []Step      `json:"steps"`
}

// Current is the first step not Done, or nil when all are.
func (p Plan) Current() *Step {
	for i := range p.Steps {
		if p.Steps[i].State != Done {
			return &p.Steps[i]
		}
	}
	return nil
}

// Objects are the nodewise objects the plan's steps apply, in order.
func (p Plan) Objects() []any {
	var out []any
	for _, s := range p.Steps {
		if s.Object != nil {
			out = append(out, s.Object)
		}
	}
	return out
}

// Input is what the plan is made from.
type Input struct {
	Inventory  inventory.Inventory
	To         skew.Version
	Policy     skew.Policy
	Rollouts   []v1alpha1.NodeRollout
	Migrations []v1alpha1.RevisionMigration
	// IstioNamespace is where istiod, ztunnel and istio-cni live.
	IstioNamespace string
	// Precheck is the number of error findings nodewise precheck reports
	// now, or -1 when it was not run.
	PrecheckErrors int
}

// RevisionName is the revision a version is installed as ("1-29" for
// 1.29.x), as Istio's canary-upgrade guide names them.
func RevisionName(v skew.Version) string { return fmt.Sprintf("%d-%d", v.Major, v.Minor) }

// Build orders the upgrade to in.To and marks each step's state.
func Build(in Input) (Plan, error) {
	if in.Policy == nil {
		in.Policy = skew.DefaultPolicy()
	}
	if in.IstioNamespace == "" {
		in.IstioNamespace = istio.DefaultNamespace
	}
	oldest, ok := oldestVersion(in.Inventory)
	if !ok {
		return Plan{}, fmt.Errorf("no istiod revision, ztunnel or sidecar with a readable version: nothing to upgrade from")
	}
	passes, err := skew.Plan(in.Policy, oldest, in.To)
	if err != nil {
		return Plan{}, err
	}
	p := Plan{To: in.To.String(), Passes: passes}
	if len(passes) == 0 {
		// Already on the target's minor: a patch upgrade is one pass.
		passes = []skew.Pass{{From: oldest, To: in.To, Why: "patch upgrade"}}
		p.Passes = passes
	}
	var prev []string // the revisions the pass moves away from
	for i, pass := range passes {
		steps, rev := in.pass(i+1, pass, prev)
		p.Steps = append(p.Steps, steps...)
		prev = []string{rev}
	}
	// The precheck run now speaks for the first step not done, when that
	// is a pass's precheck.
	for i := range p.Steps {
		s := &p.Steps[i]
		if s.State == Done {
			continue
		}
		if s.Name == "precheck" && in.PrecheckErrors == 0 {
			s.State, s.Why = Done, "no error finding now"
			continue
		}
		if s.Name == "precheck" && in.PrecheckErrors > 0 {
			s.State, s.Why = Blocked, fmt.Sprintf("%d error finding(s) now: run the command", in.PrecheckErrors)
		}
		break
	}
	// A step is Next only when every step before it is Done.
	blocked := false
	for i := range p.Steps {
		s := &p.Steps[i]
		switch {
		case blocked && s.State != Done:
			s.State = Later
		case s.State != Done:
			blocked = true
			if s.State == Later {
				s.State = Next
			}
		}
	}
	return p, nil
}

// pass is one skew pass's steps, away from old (nil for the first pass:
// every installed revision older than the pass's target), and the
// revision it installs.
func (in Input) pass(n int, pass skew.Pass, old []string) ([]Step, string) {
	inv := in.Inventory
	to := pass.To
	if to.Patch < 0 && to.Minor == in.To.Minor {
		to = in.To
	}
	rev := RevisionName(to)
	if old == nil {
		old = oldRevisions(inv, to)
	}
	var steps []Step

	pre := Step{Pass: n, Name: "precheck", By: ByNodewise, Do: "nodewise precheck --to " + to.String(),
		Changes: "nothing: finds what is known to break the upgrade (tags, dry-run policies, discovery size, drains, istioctl analyze)",
		Check:   "no error finding", State: Later}
	if atLeast(revisionVersion(inv, rev), to) {
		pre.State, pre.Why = Done, "istiod "+rev+" is installed"
	}
	steps = append(steps, pre)

	istiod := Step{Pass: n, Name: "istiod " + rev, By: ByYou,
		Changes: fmt.Sprintf("a new istiod revision %s (%s) beside %s; nothing moves to it yet", rev, to, strings.Join(old, ", ")),
		Do:      fmt.Sprintf("helm upgrade --install istiod-%s istio/istiod -n %s --version %s --set revision=%s", rev, in.IstioNamespace, helmVersion(to), rev),
		Check:   "istiod " + rev + " has a Ready replica", State: Later}
	if v, ready := revisionReady(inv, rev); atLeast(v, to) && ready {
		istiod.State, istiod.Why = Done, "istiod "+rev+" runs "+v.String()+" and is Ready"
	}
	steps = append(steps, istiod)

	nr := &v1alpha1.NodeRollout{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeRollout"},
		ObjectMeta: metav1.ObjectMeta{Name: "ambient-" + rev},
		Spec: v1alpha1.NodeRolloutSpec{Version: pin(to), MaxParallel: intstr.FromString("10%"), MaxUnavailable: intstr.FromString("10%"),
			Drain: v1alpha1.DrainSpec{Policy: v1alpha1.DrainAuto}}}
	nodes := Step{Pass: n, Name: "node components", By: ByNodewise + " (after your chart change)",
		Changes: fmt.Sprintf("ztunnel and istio-cni on every node to %s, node by node, judged (the charts' templates first: OnDelete, so nothing moves until the NodeRollout)", to),
		Do: fmt.Sprintf("helm upgrade istio-cni istio/cni -n %s --version %s --set updateStrategy.type=OnDelete; helm upgrade ztunnel istio/ztunnel -n %s --version %s --set updateStrategy.type=OnDelete; then apply NodeRollout ambient-%s (upgrade plan -o yaml prints it)",
			in.IstioNamespace, helmVersion(to), in.IstioNamespace, helmVersion(to), rev),
		Check: "every node's ztunnel and istio-cni run " + to.String(), State: Later, Object: nr}
	behind := 0
	for _, node := range inv.Nodes {
		if !atLeast(parse(node.Ztunnel), to) || !atLeast(parse(node.CNI), to) {
			behind++
		}
	}
	switch r := rollout(in.Rollouts, nr.Name); {
	case behind == 0 && len(inv.Nodes) > 0:
		nodes.State, nodes.Why = Done, fmt.Sprintf("all %d nodes run %s", len(inv.Nodes), to)
	case r != nil && (r.Status.Phase == v1alpha1.PhaseHalted || r.Status.Phase == v1alpha1.PhaseFailed || r.Status.Phase == v1alpha1.PhaseAborted):
		nodes.State, nodes.Why = Blocked, fmt.Sprintf("NodeRollout %s is %s: %s", r.Name, r.Status.Phase, r.Status.HaltReason)
	case r != nil:
		nodes.State, nodes.Why = Running, fmt.Sprintf("NodeRollout %s is %s; %d of %d nodes behind", r.Name, r.Status.Phase, behind, len(inv.Nodes))
	default:
		nodes.Why = fmt.Sprintf("%d of %d nodes behind", behind, len(inv.Nodes))
	}
	steps = append(steps, nodes)

	from := "default"
	if len(old) > 0 {
		from = old[0]
	}
	if len(inv.Waypoints) > 0 {
		steps = append(steps, waypointStep(n, in.Migrations, inv, from, rev, to))
	}
	rm := &v1alpha1.RevisionMigration{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "RevisionMigration"},
		ObjectMeta: metav1.ObjectMeta{Name: "sidecars-" + rev},
		Spec:       v1alpha1.RevisionMigrationSpec{From: from, To: rev, RateLimit: v1alpha1.RestartRateLimit{PodsPerSecond: 5}}}
	sc := Step{Pass: n, Name: "sidecar namespaces", By: ByNodewise,
		Changes: fmt.Sprintf("namespaces on %s retagged to %s and their workloads restarted, in waves, judged", from, rev),
		Do:      "apply RevisionMigration sidecars-" + rev + " (upgrade plan -o yaml prints it), or nodewise revision migrate --from " + from + " --to " + rev + " --rate 5",
		Check:   "no sidecar runs a version older than " + to.String(), State: Later, Object: rm}
	stale := 0
	for _, pod := range inv.Pods {
		if pod.Mode == inventory.ModeSidecar && !atLeast(parse(pod.Version), to) {
			stale++
		}
	}
	switch m := migration(in.Migrations, rm.Name); {
	case stale == 0:
		sc.State, sc.Why = Done, "every sidecar runs "+to.MinorString()+" or later"
	case m != nil && (m.Status.Phase == v1alpha1.MigrationHalted || m.Status.Phase == v1alpha1.MigrationRefused || m.Status.Phase == v1alpha1.MigrationAborted):
		sc.State, sc.Why = Blocked, fmt.Sprintf("RevisionMigration %s is %s: %s", m.Name, m.Status.Phase, m.Status.Reason)
	case m != nil:
		sc.State, sc.Why = Running, fmt.Sprintf("RevisionMigration %s is %s; %d sidecar(s) behind", m.Name, m.Status.Phase, stale)
	default:
		sc.Why = fmt.Sprintf("%d sidecar(s) behind", stale)
	}
	steps = append(steps, sc)

	tag := Step{Pass: n, Name: "default tag", By: ByNodewise,
		Changes: fmt.Sprintf("the default tag (and istio-injection=enabled namespaces, new pods) to %s", rev),
		Do:      fmt.Sprintf("nodewise tag set default --revision %s --overwrite", rev),
		Check:   "tag default points at " + rev, State: Later}
	if inv.Tags[istio.DefaultTag] == rev {
		tag.State, tag.Why = Done, "tag default points at "+rev
	}
	steps = append(steps, tag)

	for _, o := range old {
		rm := Step{Pass: n, Name: "remove " + o, By: ByNodewise + " (then your chart change)", PointOfNoReturn: true,
			Changes: "istiod " + o + " and its webhooks are deleted: going back means reinstalling it",
			Do:      fmt.Sprintf("nodewise revision remove %s (refused while any proxy, waypoint, tag or namespace uses it); then helm uninstall istiod-%s -n %s", o, o, in.IstioNamespace),
			Check:   "revision " + o + " is gone", State: Later}
		if !installedRev(inv, o) && installedRev(inv, rev) {
			rm.State, rm.Why = Done, "revision "+o+" is not installed"
		}
		steps = append(steps, rm)
	}
	return steps, rev
}

// helmVersion is a chart version constraint for to: the newest patch of
// its minor when the pass names no patch.
func helmVersion(to skew.Version) string {
	if to.Patch < 0 {
		return to.MinorString() + ".x"
	}
	return to.String()
}

// pin is the NodeRollout's spec.version for to: none for a pass that names
// no patch (the templates' version is rolled as the chart left it).
func pin(to skew.Version) string {
	if to.Patch < 0 {
		return ""
	}
	return to.String()
}

func parse(s string) skew.Version {
	v, err := skew.ParseVersion(s)
	if err != nil {
		return skew.Version{}
	}
	return v
}

// atLeast: v is on to's minor or later (a patch target needs that patch).
func atLeast(v, to skew.Version) bool {
	if v.Major != to.Major {
		return v.Major > to.Major
	}
	if v.Minor != to.Minor {
		return v.Minor > to.Minor
	}
	return to.Patch < 0 || v.Patch >= to.Patch
}

func installedRev(inv inventory.Inventory, rev string) bool {
	for _, r := range inv.Revisions {
		if r.Name == rev {
			return true
		}
	}
	return false
}

func revisionVersion(inv inventory.Inventory, rev string) skew.Version {
	v, _ := revisionReady(inv, rev)
	return v
}

func revisionReady(inv inventory.Inventory, rev string) (skew.Version, bool) {
	for _, r := range inv.Revisions {
		if r.Name == rev {
			return parse(r.Version), r.Ready
		}
	}
	return skew.Version{}, false
}

// oldRevisions are the installed revisions older than to, oldest first.
func oldRevisions(inv inventory.Inventory, to skew.Version) []string {
	var out []string
	for _, r := range inv.Revisions {
		if v := parse(r.Version); v != (skew.Version{}) && v.Minor < to.Minor && r.Name != RevisionName(to) {
			out = append(out, r.Name)
		}
	}
	return out
}

func oldestVersion(inv inventory.Inventory) (skew.Version, bool) {
	var best skew.Version
	found := false
	consider := func(s string) {
		if v, err := skew.ParseVersion(s); err == nil && (!found || v.Less(best)) {
			best, found = v, true
		}
	}
	for _, r := range inv.Revisions {
		consider(r.Version)
	}
	for _, n := range inv.Nodes {
		consider(n.Ztunnel)
		consider(n.CNI)
	}
	for _, p := range inv.Pods {
		if p.Mode == inventory.ModeSidecar {
			consider(p.Version)
		}
	}
	for _, w := range inv.Waypoints {
		consider(w.Version)
	}
	return best, found
}

func rollout(rs []v1alpha1.NodeRollout, name string) *v1alpha1.NodeRollout {
	for i := range rs {
		if rs[i].Name == name {
			return &rs[i]
		}
	}
	return nil
}

func migration(ms []v1alpha1.RevisionMigration, name string) *v1alpha1.RevisionMigration {
	for i := range ms {
		if ms[i].Name == name {
			return &ms[i]
		}
	}
	return nil
}

// waypointStep moves every waypoint to rev, by a RevisionMigration with
// waypoints: Only (it labels each waypoint Gateway istio.io/rev=rev in
// waves; istiod rolls the waypoint's Deployment). Done when every
// waypoint's pods run to on rev. A cluster without waypoints has no such
// step.
func waypointStep(n int, ms []v1alpha1.RevisionMigration, inv inventory.Inventory, from, rev string, to skew.Version) Step {
	rm := &v1alpha1.RevisionMigration{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "RevisionMigration"},
		ObjectMeta: metav1.ObjectMeta{Name: "waypoints-" + rev},
		Spec:       v1alpha1.RevisionMigrationSpec{From: from, To: rev, Waypoints: v1alpha1.WaypointsOnly, RateLimit: v1alpha1.RestartRateLimit{PodsPerSecond: 5}}}
	changes := fmt.Sprintf("each waypoint's Gateway labelled %s=%s in waves, judged: istiod %s rolls its Deployment onto the new proxy (L7 for the namespaces and services that use it)", istio.LabelRev, rev, rev)
	if ok, why := skew.WaypointCanary(inv, to); ok {
		changes = fmt.Sprintf("each waypoint moved in waves by weighted canary (%s): a canary Gateway on %s beside it, its users' connections shifted to it 10→50→100%%, each step judged, then the Gateway labelled %s=%s and the canary removed", why, rev, istio.LabelRev, rev)
	} else if !to.Less(skew.WaypointCanaryMin) {
		changes += fmt.Sprintf("; by weighted canary instead if every ztunnel is %s+ when the migration starts (now: %s)", skew.WaypointCanaryMin, why)
	}
	st := Step{Pass: n, Name: "waypoints", By: ByNodewise, Object: rm, Changes: changes,
		Check: fmt.Sprintf("every waypoint runs %s on %s", to, rev), State: Later}
	var behind, rolling, cmds []string
	for _, w := range inv.Waypoints {
		if inv.Resolve(w.Revision) == rev && atLeast(parse(w.Version), to) {
			continue
		}
		behind = append(behind, w.Ref()+" "+w.Version+" on "+w.Revision)
		if w.Rolling {
			rolling = append(rolling, w.Ref())
		}
		cmds = append(cmds, fmt.Sprintf("kubectl label gateway -n %s %s %s=%s --overwrite", w.Namespace, w.Name, istio.LabelRev, rev))
	}
	st.Do = "apply RevisionMigration waypoints-" + rev + " (upgrade plan -o yaml prints it); unjudged, by hand: " + strings.Join(cmds, "; ")
	switch m := migration(ms, rm.Name); {
	case len(behind) == 0:
		st.State, st.Why = Done, fmt.Sprintf("all %d waypoints run %s on %s", len(inv.Waypoints), to.MinorString(), rev)
	case m != nil && (m.Status.Phase == v1alpha1.MigrationHalted || m.Status.Phase == v1alpha1.MigrationRefused || m.Status.Phase == v1alpha1.MigrationAborted):
		st.State, st.Why = Blocked, fmt.Sprintf("RevisionMigration %s is %s: %s", m.Name, m.Status.Phase, m.Status.Reason)
	case m != nil:
		st.State, st.Why = Running, fmt.Sprintf("RevisionMigration %s is %s%s; %d of %d waypoints behind", m.Name, m.Status.Phase, canaryAt(m.Status), len(behind), len(inv.Waypoints))
	case len(rolling) > 0:
		st.State, st.Why = Running, fmt.Sprintf("%d of %d waypoints behind (%s); rolling: %s", len(behind), len(inv.Waypoints), strings.Join(behind, ", "), strings.Join(rolling, ", "))
	default:
		st.Why = fmt.Sprintf("%d of %d waypoints behind: %s", len(behind), len(inv.Waypoints), strings.Join(behind, ", "))
	}
	return st
}

// canaryAt is where a waypoint canary migration's current wave is (" (wave
// W by canary at 50%)"), or "" for one that relabels in place.
func canaryAt(st v1alpha1.RevisionMigrationStatus) string {
	if st.WaypointMethod != v1alpha1.WaypointCanary || int(st.CurrentWave) >= len(st.Waves) {
		return ""
	}
	w := st.Waves[st.CurrentWave]
	switch {
	case w.CanaryPromoted:
		return fmt.Sprintf(" (wave %s by canary: promoting)", w.Name)
	case w.CanaryWeight > 0:
		return fmt.Sprintf(" (wave %s by canary at %d%%)", w.Name, w.CanaryWeight)
	}
	return fmt.Sprintf(" (wave %s by canary: starting)", w.Name)
}
