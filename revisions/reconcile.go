package revisions

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/istio/skew"
)

// reconcile takes one step of rm from the snapshot, and says when to look
// again without an event (0: only on the next event). A spec change that
// step did not write (an edit of a finished or paused migration) is written
// as observed all the same: GitOps tools wait for observedGeneration.
func (c *Controller) reconcile(ctx context.Context, rm *v1alpha1.RevisionMigration, snap *snapshot) (time.Duration, error) {
	defer c.observePhases(rm)
	next, err := c.step(ctx, rm, snap)
	if err == nil && rm.Status.ObservedGeneration != rm.Generation {
		err = c.writeStatus(ctx, rm)
	}
	return next, err
}

// step is reconcile's one step.
func (c *Controller) step(ctx context.Context, rm *v1alpha1.RevisionMigration, snap *snapshot) (time.Duration, error) {
	spec := Defaulted(rm.Spec)
	if tok := rm.Annotations[AnnotationResumeToken]; tok != "" && tok != rm.Status.ResumeToken {
		return c.cfg.Interval, c.resume(ctx, rm, spec, tok)
	}
	switch rm.Status.Phase {
	case "", v1alpha1.MigrationPending:
		return c.cfg.Interval, c.start(ctx, rm, spec, snap)
	case v1alpha1.MigrationAborted, v1alpha1.MigrationRefused:
		return 0, nil
	case v1alpha1.MigrationHalted, v1alpha1.MigrationSucceeded:
		if handedOver(rm.Status) {
			return 0, c.refuseAbortAfterHandover(ctx, rm, spec)
		}
		// The handover runs once Succeeded, and, once begun, finishes before
		// an abort is looked at (which it then refuses).
		if rm.Status.Phase == v1alpha1.MigrationSucceeded && spec.StableTag != "" && (spec.Abort == "" || handoverBegun(spec, snap)) {
			return 0, c.handover(ctx, rm, spec, snap)
		}
		// A finished migration can still be rolled back while From is installed.
		if spec.Abort == "" {
			return 0, nil
		}
		return c.cfg.Interval, c.setPhase(ctx, rm, v1alpha1.MigrationAborting, abortReason(spec.Abort))
	case v1alpha1.MigrationProgressing, v1alpha1.MigrationGating, v1alpha1.MigrationPaused:
		if spec.Abort != "" {
			return c.cfg.Interval, c.setPhase(ctx, rm, v1alpha1.MigrationAborting, abortReason(spec.Abort))
		}
		return c.progress(ctx, rm, spec, snap)
	case v1alpha1.MigrationAborting:
		return c.abort(ctx, rm, spec, snap)
	}
	return 0, nil
}

// writeStatus persists rm.Status with rm's resourceVersion (a conflict fails
// the reconcile, which retries from a fresh read) and adopts the result.
// Every write carries the generation it observed and the Ready, Reconciling
// and Stalled conditions of its phase, the phase's reason their message.
func (c *Controller) writeStatus(ctx context.Context, rm *v1alpha1.RevisionMigration) error {
	rm.Status.ObservedGeneration = rm.Generation
	v1alpha1.SetProgress(&rm.Status.Conditions, rm.Status.Phase.Progress(), string(rm.Status.Phase), conditionMessage(rm.Status.Reason), rm.Generation, metav1.NewTime(c.cfg.Now()))
	old := rm.ResourceVersion
	out, err := c.cfg.Migrations.UpdateStatus(ctx, rm, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("writing status of %s: %w", rm.Name, err)
	}
	c.wrote(rm.Name, old, out.ResourceVersion)
	*rm = *out
	return nil
}

func (c *Controller) setPhase(ctx context.Context, rm *v1alpha1.RevisionMigration, p v1alpha1.MigrationPhase, reason string) error {
	c.cfg.Log.Info("migration phase", zap.String("migration", rm.Name), zap.String("phase", string(p)), zap.String("reason", reason))
	changed := rm.Status.Phase != p
	rm.Status.Phase, rm.Status.Reason = p, reason
	if p == v1alpha1.MigrationSucceeded && rm.Status.CompletedAt == nil {
		now := metav1.NewTime(c.cfg.Now())
		rm.Status.CompletedAt = &now
	}
	meta.SetStatusCondition(&rm.Status.Conditions, completeCondition(p, reason, rm.Generation))
	if err := c.writeStatus(ctx, rm); err != nil {
		return err
	}
	if c.cfg.Events != nil && changed {
		typ := corev1.EventTypeNormal
		switch p {
		case v1alpha1.MigrationHalted, v1alpha1.MigrationRefused, v1alpha1.MigrationAborting:
			typ = corev1.EventTypeWarning
		}
		c.cfg.Events.Event(rm, typ, string(p), reason)
	}
	return nil
}

// ConditionComplete is True once a migration succeeded, so that
// `kubectl wait --for=condition=Complete revisionmigration/NAME` works; its
// reason is the phase.
const ConditionComplete = "Complete"

func completeCondition(p v1alpha1.MigrationPhase, reason string, gen int64) metav1.Condition {
	st := metav1.ConditionFalse
	if p == v1alpha1.MigrationSucceeded {
		st = metav1.ConditionTrue
	}
	return metav1.Condition{Type: ConditionComplete, Status: st, Reason: string(p), Message: conditionMessage(reason), ObservedGeneration: gen}
}

// conditionMessage is a phase's reason cut to 1 KiB, as the conditions carry it.
func conditionMessage(reason string) string {
	if len(reason) > 1024 {
		return reason[:1024]
	}
	return reason
}

func (c *Controller) refuse(ctx context.Context, rm *v1alpha1.RevisionMigration, reason string) error {
	return c.setPhase(ctx, rm, v1alpha1.MigrationRefused, reason)
}

// target is where a namespace is headed: the revision and its version.
type target struct {
	rev     string
	version skew.Version
}

// target is where a revision's proxies are headed: its istiod version.
func targetOf(inv inventory.Inventory, rev string) (target, error) {
	for _, r := range inv.Revisions {
		if r.Name != rev {
			continue
		}
		v, err := skew.ParseVersion(r.Version)
		if err != nil {
			return target{}, fmt.Errorf("revision %s: %w", rev, err)
		}
		return target{rev: rev, version: v}, nil
	}
	return target{}, fmt.Errorf("revision %s is no longer installed", rev)
}

// progress drives the current wave: retag, stamp, restart, wait, gate.
func (c *Controller) progress(ctx context.Context, rm *v1alpha1.RevisionMigration, spec v1alpha1.RevisionMigrationSpec, snap *snapshot) (time.Duration, error) {
	st := &rm.Status
	if int(st.CurrentWave) >= len(st.Waves) {
		return 0, c.setPhase(ctx, rm, v1alpha1.MigrationSucceeded, succeededReason(st, spec))
	}
	wave := st.CurrentWave
	// Paused: the wave in flight finishes; one not started yet does not start.
	if spec.Paused && !waveStarted(st, wave) {
		reason := fmt.Sprintf("paused before wave %s (spec.paused; nodewise revision resume %s)", st.Waves[wave].Name, rm.Name)
		if st.Phase == v1alpha1.MigrationPaused && st.Reason == reason {
			return 0, nil
		}
		return 0, c.setPhase(ctx, rm, v1alpha1.MigrationPaused, reason)
	}
	if st.Phase == v1alpha1.MigrationPaused {
		return c.cfg.Interval, c.setPhase(ctx, rm, v1alpha1.MigrationProgressing, fmt.Sprintf("resumed: starting wave %s", st.Waves[wave].Name))
	}
	// 0. Conformance: the user's Job, before anything of the wave moves.
	if !waveStarted(st, wave) {
		if pass, next, err := c.conformance(ctx, rm, spec, wave); !pass || err != nil {
			return next, err
		}
	}
	to, err := targetOf(snap.inv, spec.To)
	if err != nil {
		return 0, err
	}
	c.track(ctx, rm, snap)

	// 1. Retag: record the original labels, then patch them (a waypoint
	// migration: its Gateways').
	canary := spec.Waypoints == v1alpha1.WaypointsOnly && st.WaypointMethod == v1alpha1.WaypointCanary
	switch {
	case canary:
		err = c.startCanaries(ctx, rm, spec, wave)
	case spec.Waypoints == v1alpha1.WaypointsOnly:
		err = c.moveWaypoints(ctx, rm, spec, wave)
	default:
		err = c.retagWave(ctx, rm, spec, snap, wave)
	}
	if err != nil {
		return 0, err
	}
	// 2. Stamp: record restartedAt before any workload carries it.
	if err := c.stamp(ctx, rm, wave, v1alpha1.NamespaceRetagged, v1alpha1.NamespaceRestarting); err != nil {
		return 0, err
	}
	// 3. Restart and wait (a waypoint migration only waits: istiod rolls
	// the waypoints).
	var wait time.Duration
	if spec.Waypoints == v1alpha1.WaypointsOnly {
		wait, err = c.waitWaypoints(ctx, rm, snap, wave, v1alpha1.NamespaceRestarting, v1alpha1.NamespaceReady, to, canary)
	} else {
		wait, err = c.drive(ctx, rm, spec, snap, wave, v1alpha1.NamespaceRestarting, v1alpha1.NamespaceReady, to)
	}
	var wrong errWrongProxy
	if errors.As(err, &wrong) {
		// A Fail, never a hold: the restart put the old proxy back.
		return 0, c.setPhase(ctx, rm, v1alpha1.MigrationHalted, fmt.Sprintf("wave %s failed: %s", st.Waves[wave].Name, wrong.reason))
	}
	if err != nil {
		return 0, err
	}
	for _, ns := range st.Namespaces {
		if ns.Wave == wave && ns.Phase != v1alpha1.NamespaceReady && ns.Phase != v1alpha1.NamespaceSkipped {
			return wait, nil
		}
	}
	// A waypoint canary: each weight is judged as a wave is; once promoted,
	// the wave is done when the canaries are gone.
	promoted := false
	if canary {
		step, err := c.canaryWave(ctx, rm, spec, snap, wave, to)
		if err != nil || step == canaryWait {
			return c.cfg.Interval, err
		}
		promoted = step == canaryDone
	}
	// 4. Gate, from when the wave was first Ready (persisted: the soak
	// survives a restart).
	if st.Waves[wave].ReadyAt == nil {
		now := metav1.NewTime(c.cfg.Now())
		st.Waves[wave].ReadyAt = &now
		if err := c.writeStatus(ctx, rm); err != nil {
			return 0, err
		}
	}
	w := st.Waves[wave]
	verdict := health.Verdict{Outcome: health.Pass}
	// A wave that moved nothing (a percent wave past a small fleet's last
	// namespace, or every namespace skipped) has nothing to judge: it passes.
	if c.cfg.Gate != nil && moved(st, wave) && !promoted {
		in := c.waveInput(rm, spec, snap, wave)
		verdict, err = c.cfg.Gate.Judge(ctx, in)
		if err != nil {
			verdict = health.Verdict{Outcome: health.Inconclusive, Reasons: []string{"gate error: " + err.Error()}}
		}
		if verdict.Summary != nil || verdict.Outcome == health.Fail {
			st.Waves[wave].Judgement = judgementOf(verdict) // every reason, behind the headline the phase's reason carries
		}
	}
	switch verdict.Outcome {
	case health.Pass:
		if canary && !promoted {
			return c.cfg.Interval, c.setPhase(ctx, rm, v1alpha1.MigrationProgressing, nextWeight(spec, &st.Waves[wave]))
		}
		st.CurrentWave++
		now := metav1.NewTime(c.cfg.Now())
		st.WaveStartedAt = &now
		if int(st.CurrentWave) >= len(st.Waves) {
			return 0, c.setPhase(ctx, rm, v1alpha1.MigrationSucceeded, succeededReason(st, spec))
		}
		return c.cfg.Interval, c.setPhase(ctx, rm, v1alpha1.MigrationProgressing, fmt.Sprintf("wave %s passed; starting wave %s", w.Name, st.Waves[st.CurrentWave].Name))
	case health.Fail:
		return 0, c.setPhase(ctx, rm, v1alpha1.MigrationHalted, fmt.Sprintf("wave %s failed its gate: %s", w.Name, headline(verdict)))
	default:
		reason := fmt.Sprintf("wave %s held by its gate: %s", w.Name, headline(verdict))
		if st.Phase == v1alpha1.MigrationGating && st.Reason == reason {
			// Same hold: the table's numbers are not worth a write each time.
			return c.cfg.Interval, nil
		}
		return c.cfg.Interval, c.setPhase(ctx, rm, v1alpha1.MigrationGating, reason)
	}
}

// moved reports whether wave moved any namespace (one not Skipped).
func moved(st *v1alpha1.RevisionMigrationStatus, wave int32) bool {
	for _, ns := range st.Namespaces {
		if ns.Wave == wave && ns.Phase != v1alpha1.NamespaceSkipped {
			return true
		}
	}
	return false
}

// waveStarted reports whether any namespace of wave has left Pending (its
// labels recorded or patched): such a wave is in flight and a pause lets it finish.
func waveStarted(st *v1alpha1.RevisionMigrationStatus, wave int32) bool {
	for _, ns := range st.Namespaces {
		if ns.Wave == wave && ns.Phase != v1alpha1.NamespacePending {
			return true
		}
	}
	return false
}

// resume acts on a new resume token: it is recorded, and a halted migration
// goes back to judging its halted wave, from a fresh soak. Nothing is moved
// or restarted again for that: the wave's namespaces keep their labels and
// stamps, so a wave whose restart put the old proxy back halts again at once,
// and one whose gate failed moves on only when the gate passes it this time.
// A token seen in any other phase is only recorded, so that an old token
// cannot clear a later halt.
func (c *Controller) resume(ctx context.Context, rm *v1alpha1.RevisionMigration, spec v1alpha1.RevisionMigrationSpec, tok string) error {
	st := &rm.Status
	st.ResumeToken = tok
	if st.Phase != v1alpha1.MigrationHalted || spec.Abort != "" || int(st.CurrentWave) >= len(st.Waves) {
		return c.writeStatus(ctx, rm)
	}
	w := &st.Waves[st.CurrentWave]
	if cf := st.Conformance; cf != nil && cf.Outcome == v1alpha1.ConformanceFailed && !waveStarted(st, st.CurrentWave) {
		return c.setPhase(ctx, rm, v1alpha1.MigrationProgressing, fmt.Sprintf("resumed after a halt: the conformance Job runs again before wave %s", w.Name))
	}
	w.ReadyAt = nil
	return c.setPhase(ctx, rm, v1alpha1.MigrationProgressing, fmt.Sprintf("resumed after a halt: wave %s is judged again from a fresh soak", w.Name))
}

func (c *Controller) stamp(ctx context.Context, rm *v1alpha1.RevisionMigration, wave int32, from, to v1alpha1.NamespacePhase) error {
	return c.stampWhere(ctx, rm, func(ns *v1alpha1.NamespaceStatus) bool { return ns.Wave == wave && ns.Phase == from }, to)
}

// stampWhere gives the selected namespaces a fresh restartedAt stamp and a
// new generation, and persists it before any workload is touched.
func (c *Controller) stampWhere(ctx context.Context, rm *v1alpha1.RevisionMigration, pick func(*v1alpha1.NamespaceStatus) bool, to v1alpha1.NamespacePhase) error {
	stamp := c.cfg.Now().UTC().Format(time.RFC3339Nano)
	changed := false
	for i := range rm.Status.Namespaces {
		ns := &rm.Status.Namespaces[i]
		if !pick(ns) {
			continue
		}
		ns.RestartedAt, ns.Generation, ns.Phase, ns.Message = stamp, ns.Generation+1, to, "restart recorded"
		changed = true
	}
	if !changed {
		return nil
	}
	return c.writeStatus(ctx, rm)
}

// waveInput is what the gate judges the current wave with. It also tells a
// NodeTracker gate the nodes of every pod the migration covers. It is pure
// but for that hook.
func (c *Controller) waveInput(rm *v1alpha1.RevisionMigration, spec v1alpha1.RevisionMigrationSpec, snap *snapshot, wave int32) WaveInput {
	st := &rm.Status
	w := st.Waves[wave]
	in := WaveInput{Migration: rm.Name, Wave: w.Name, From: spec.From, To: spec.To, Spec: spec.Gates}
	if st.WaveStartedAt != nil {
		in.Since = st.WaveStartedAt.Time
	}
	if w.ReadyAt != nil {
		in.ReadyAt = w.ReadyAt.Time
	}
	var later, earlier []string
	for _, ns := range st.Namespaces {
		switch {
		case ns.Wave == wave:
			if ns.Phase != v1alpha1.NamespaceSkipped {
				in.Namespaces = append(in.Namespaces, ns.Name)
			}
		case ns.Wave > wave && ns.Phase == v1alpha1.NamespacePending:
			later = append(later, ns.Name)
		case ns.Wave < wave && ns.Phase == v1alpha1.NamespaceReady:
			earlier = append(earlier, ns.Name)
		}
	}
	in.Control = later
	if len(later) == 0 {
		in.Control, in.ControlMigrated = earlier, true
	}
	nodes := map[string]bool{}
	for _, ns := range append(append([]string(nil), in.Namespaces...), in.Control...) {
		for _, p := range snap.pods[ns] {
			if p.Spec.NodeName != "" {
				nodes[p.Spec.NodeName] = true
			}
		}
	}
	for n := range nodes {
		in.Nodes = append(in.Nodes, n)
	}
	sort.Strings(in.Nodes)
	return in
}

// track gives a NodeTracker gate the nodes of every pod the migration covers,
// so samples exist from before each wave.
func (c *Controller) track(ctx context.Context, rm *v1alpha1.RevisionMigration, snap *snapshot) {
	t, ok := c.cfg.Gate.(NodeTracker)
	if !ok {
		return
	}
	nodes := map[string]bool{}
	for _, ns := range rm.Status.Namespaces {
		for _, p := range snap.pods[ns.Name] {
			if p.Spec.NodeName != "" {
				nodes[p.Spec.NodeName] = true
			}
		}
	}
	list := make([]string, 0, len(nodes))
	for n := range nodes {
		list = append(list, n)
	}
	sort.Strings(list)
	t.Track(ctx, list)
}

// headline is a wave's verdict in one line: its headline, else its first
// reason and how many more follow (health.Lead); every reason stays in the
// wave's judgement (revision explain).
func headline(v health.Verdict) string {
	if v.Headline != "" {
		return v.Headline
	}
	return health.Lead(v.Reasons)
}

// succeededReason is a Succeeded migration's reason, which the handover to
// spec.stableTag extends (GitOps tools show the reason).
func succeededReason(st *v1alpha1.RevisionMigrationStatus, spec v1alpha1.RevisionMigrationSpec) string {
	return fmt.Sprintf("all %d namespaces on %s", len(st.Namespaces), spec.To)
}
