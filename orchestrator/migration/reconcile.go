package migration

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/orchestrator/apis/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/inventory"
	"github.com/nodewise/nodewise/orchestrator/revtag"
	"github.com/nodewise/nodewise/orchestrator/skew"
)

func (c *Controller) reconcile(ctx context.Context, rm *v1alpha1.RevisionMigration) error {
	spec := Defaulted(rm.Spec)
	defer c.observePhases(rm)
	switch rm.Status.Phase {
	case "", v1alpha1.MigrationPending:
		return c.start(ctx, rm, spec)
	case v1alpha1.MigrationSucceeded, v1alpha1.MigrationAborted, v1alpha1.MigrationRefused:
		return nil
	case v1alpha1.MigrationHalted:
		if !spec.Abort {
			return nil
		}
		return c.setPhase(ctx, rm, v1alpha1.MigrationAborting, "abort requested")
	case v1alpha1.MigrationProgressing, v1alpha1.MigrationGating:
		if spec.Abort {
			return c.setPhase(ctx, rm, v1alpha1.MigrationAborting, "abort requested")
		}
		return c.progress(ctx, rm, spec)
	case v1alpha1.MigrationAborting:
		return c.abort(ctx, rm, spec)
	}
	return nil
}

// writeStatus persists rm.Status with rm's resourceVersion (a conflict fails
// the reconcile, which retries from a fresh read) and adopts the result.
func (c *Controller) writeStatus(ctx context.Context, rm *v1alpha1.RevisionMigration) error {
	rm.Status.ObservedGeneration = rm.Generation
	out, err := c.cfg.Migrations.UpdateStatus(ctx, rm)
	if err != nil {
		return fmt.Errorf("writing status of %s: %w", rm.Name, err)
	}
	*rm = *out
	return nil
}

func (c *Controller) setPhase(ctx context.Context, rm *v1alpha1.RevisionMigration, p v1alpha1.MigrationPhase, reason string) error {
	c.cfg.Log.Info("migration phase", zap.String("migration", rm.Name), zap.String("phase", string(p)), zap.String("reason", reason))
	changed := rm.Status.Phase != p
	rm.Status.Phase, rm.Status.Reason = p, reason
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

func (c *Controller) refuse(ctx context.Context, rm *v1alpha1.RevisionMigration, reason string) error {
	return c.setPhase(ctx, rm, v1alpha1.MigrationRefused, reason)
}

// start checks the request against the cluster, points the tag at To and
// fixes the waves. Nothing is retagged or restarted here.
func (c *Controller) start(ctx context.Context, rm *v1alpha1.RevisionMigration, spec v1alpha1.RevisionMigrationSpec) error {
	if err := Validate(spec); err != nil {
		return c.refuse(ctx, rm, err.Error())
	}
	inv, err := inventory.Observe(ctx, c.cfg.Kube, c.cfg.Inventory)
	if err != nil {
		return err
	}
	known := func() string {
		var names []string
		for _, r := range inv.Revisions {
			names = append(names, r.Name)
		}
		return strings.Join(names, ", ")
	}
	fromV, ok := inv.RevisionVersion(spec.From)
	if !ok {
		return c.refuse(ctx, rm, fmt.Sprintf("unknown revision %q in from (installed: %s)", spec.From, known()))
	}
	toV, ok := inv.RevisionVersion(spec.To)
	if !ok {
		return c.refuse(ctx, rm, fmt.Sprintf("unknown revision %q in to (installed: %s)", spec.To, known()))
	}
	if _, err := skew.ParseVersion(fromV); err != nil {
		return c.refuse(ctx, rm, fmt.Sprintf("revision %s: unreadable istiod version: %v", spec.From, err))
	}
	target, err := skew.ParseVersion(toV)
	if err != nil {
		return c.refuse(ctx, rm, fmt.Sprintf("revision %s: unreadable istiod version: %v", spec.To, err))
	}
	if _, err := revtag.RevisionWebhook(ctx, c.cfg.Kube, spec.To); err != nil {
		return c.refuse(ctx, rm, err.Error())
	}
	for _, r := range inv.Revisions {
		if r.Name == spec.To && !r.Ready {
			// Not a refusal: the install may still be rolling out. Nothing moves until it is Ready.
			reason := fmt.Sprintf("waiting for istiod of revision %s to have a Ready replica", spec.To)
			if rm.Status.Phase == v1alpha1.MigrationPending && rm.Status.Reason == reason {
				return nil
			}
			return c.setPhase(ctx, rm, v1alpha1.MigrationPending, reason)
		}
	}

	nsList, err := c.cfg.Kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: LabelRev})
	if err != nil {
		return fmt.Errorf("listing namespaces: %w", err)
	}
	var cands []Candidate
	inScope := map[string]string{}
	istioNS := c.cfg.Inventory.IstioNamespace
	if istioNS == "" {
		istioNS = "istio-system"
	}
	for _, ns := range nsList.Items {
		rev := ns.Labels[LabelRev]
		// The control plane's own namespace is never restarted: its DaemonSets
		// are the ambient data plane, which NodeRollout moves node by node.
		// Ambient namespaces have no sidecars to move (their istio.io/rev
		// selects waypoints): NodeRollout moves their data plane.
		if rev == spec.Tag || inv.Resolve(rev) != spec.From || ns.Name == istioNS || ns.Labels[inventory.LabelDataplaneMode] == string(inventory.ModeAmbient) {
			continue
		}
		cands = append(cands, Candidate{Name: ns.Name, Labels: ns.Labels})
		inScope[ns.Name] = rev
	}
	if len(cands) == 0 {
		return c.refuse(ctx, rm, fmt.Sprintf("no namespace uses revision %s (directly or through a tag other than %s)", spec.From, spec.Tag))
	}
	var proxies []skew.Observation
	for _, p := range inv.Pods {
		if _, ok := inScope[p.Namespace]; !ok || p.Mode != inventory.ModeSidecar {
			continue
		}
		if v, err := skew.ParseVersion(p.Version); err == nil {
			proxies = append(proxies, skew.Observation{Component: skew.Sidecar, Subject: p.Namespace + "/" + p.Name, Revision: p.Revision, Version: v})
		}
	}
	if err := skew.CheckControlPlaneMove(c.cfg.Policy, proxies, target); err != nil {
		return c.refuse(ctx, rm, "refusing "+spec.From+" -> "+spec.To+": "+err.Error())
	}

	if cur, err := revtag.Get(ctx, c.cfg.Kube, spec.Tag); err == nil && cur != spec.To {
		for _, ns := range nsList.Items {
			if ns.Labels[LabelRev] == spec.Tag {
				return c.refuse(ctx, rm, fmt.Sprintf("tag %s points at %s and namespace %s uses it: moving it would move that namespace unrestarted; pick another tag", spec.Tag, cur, ns.Name))
			}
		}
	}
	if err := revtag.Set(ctx, c.cfg.Kube, revtag.SetOptions{Tag: spec.Tag, Revision: spec.To, IstioNamespace: c.cfg.Inventory.IstioNamespace, Overwrite: true}); err != nil {
		return fmt.Errorf("pointing tag %s at %s: %w", spec.Tag, spec.To, err)
	}

	waves := Resolve(spec.Waves, spec.TierLabel, cands)
	st := &rm.Status
	st.Waves = waves
	st.Namespaces = nil
	for i, w := range waves {
		for _, ns := range w.Namespaces {
			st.Namespaces = append(st.Namespaces, v1alpha1.NamespaceStatus{Name: ns, Wave: int32(i), OriginalRev: inScope[ns], Phase: v1alpha1.NamespacePending})
		}
	}
	now := metav1.NewTime(c.cfg.Now())
	st.StartedAt, st.WaveStartedAt, st.CurrentWave = &now, &now, 0
	return c.setPhase(ctx, rm, v1alpha1.MigrationProgressing, fmt.Sprintf("%d namespaces in %d waves, %s (%s) -> %s (%s) via tag %s", len(st.Namespaces), len(waves), spec.From, fromV, spec.To, toV, spec.Tag))
}

// target is where a namespace is headed: the revision and its version.
type target struct {
	rev     string
	version skew.Version
}

// target observes where a revision's proxies are headed: its istiod version.
func (c *Controller) target(ctx context.Context, rev string) (target, error) {
	revs, err := inventory.Revisions(ctx, c.cfg.Kube, c.cfg.Inventory, nil)
	if err != nil {
		return target{}, err
	}
	for _, r := range revs {
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
func (c *Controller) progress(ctx context.Context, rm *v1alpha1.RevisionMigration, spec v1alpha1.RevisionMigrationSpec) error {
	st := &rm.Status
	if int(st.CurrentWave) >= len(st.Waves) {
		return c.setPhase(ctx, rm, v1alpha1.MigrationSucceeded, fmt.Sprintf("all %d namespaces on %s", len(st.Namespaces), spec.To))
	}
	to, err := c.target(ctx, spec.To)
	if err != nil {
		return err
	}
	wave := st.CurrentWave

	// 1. Retag: label first (idempotent), then record.
	changed := false
	for i := range st.Namespaces {
		ns := &st.Namespaces[i]
		if ns.Wave != wave || ns.Phase != v1alpha1.NamespacePending {
			continue
		}
		if err := c.label(ctx, ns.Name, spec.Tag); err != nil {
			return err
		}
		ns.Phase, changed = v1alpha1.NamespaceRetagged, true
	}
	if changed {
		if err := c.writeStatus(ctx, rm); err != nil {
			return err
		}
	}
	// 2. Stamp: record restartedAt before any workload carries it.
	if err := c.stamp(ctx, rm, wave, v1alpha1.NamespaceRetagged, v1alpha1.NamespaceRestarting); err != nil {
		return err
	}
	// 3. Restart and wait.
	if err := c.drive(ctx, rm, spec, wave, v1alpha1.NamespaceRestarting, v1alpha1.NamespaceReady, to); err != nil {
		return err
	}
	for _, ns := range st.Namespaces {
		if ns.Wave == wave && ns.Phase != v1alpha1.NamespaceReady {
			return nil
		}
	}
	// 4. Gate.
	w := st.Waves[wave]
	verdict := health.Verdict{Outcome: health.Pass}
	if c.cfg.Gate != nil {
		since := time.Time{}
		if st.WaveStartedAt != nil {
			since = st.WaveStartedAt.Time
		}
		verdict, err = c.cfg.Gate.Judge(ctx, WaveInput{Migration: rm.Name, Wave: w.Name, Namespaces: w.Namespaces, Since: since, Spec: spec.Gates})
		if err != nil {
			verdict = health.Verdict{Outcome: health.Inconclusive, Reasons: []string{"gate error: " + err.Error()}}
		}
	}
	switch verdict.Outcome {
	case health.Pass:
		st.CurrentWave++
		now := metav1.NewTime(c.cfg.Now())
		st.WaveStartedAt = &now
		if int(st.CurrentWave) >= len(st.Waves) {
			return c.setPhase(ctx, rm, v1alpha1.MigrationSucceeded, fmt.Sprintf("all %d namespaces on %s", len(st.Namespaces), spec.To))
		}
		return c.setPhase(ctx, rm, v1alpha1.MigrationProgressing, fmt.Sprintf("wave %s passed; starting wave %s", w.Name, st.Waves[st.CurrentWave].Name))
	case health.Fail:
		return c.setPhase(ctx, rm, v1alpha1.MigrationHalted, fmt.Sprintf("wave %s failed its gate: %s", w.Name, strings.Join(verdict.Reasons, "; ")))
	default:
		reason := fmt.Sprintf("wave %s held by its gate: %s", w.Name, strings.Join(verdict.Reasons, "; "))
		if st.Phase == v1alpha1.MigrationGating && st.Reason == reason {
			return nil
		}
		return c.setPhase(ctx, rm, v1alpha1.MigrationGating, reason)
	}
}

// abort retags every moved namespace back and restarts it; namespaces never
// moved are left alone.
func (c *Controller) abort(ctx context.Context, rm *v1alpha1.RevisionMigration, spec v1alpha1.RevisionMigrationSpec) error {
	st := &rm.Status
	// Only From is needed to go back: an abort works even if To is gone.
	back, err := c.target(ctx, spec.From)
	if err != nil {
		return err
	}
	changed := false
	for i := range st.Namespaces {
		ns := &st.Namespaces[i]
		switch ns.Phase {
		case v1alpha1.NamespaceRetagged, v1alpha1.NamespaceRestarting, v1alpha1.NamespaceReady:
		default:
			continue
		}
		if err := c.label(ctx, ns.Name, ns.OriginalRev); err != nil {
			return err
		}
		changed = true
		if ns.Generation == 0 {
			ns.Phase, ns.Message = v1alpha1.NamespaceRolledBack, "retagged back before any restart"
			continue
		}
		ns.Phase = v1alpha1.NamespaceReverting
		ns.RestartedAt = ""
	}
	if changed {
		if err := c.writeStatus(ctx, rm); err != nil {
			return err
		}
	}
	// Reverting namespaces without a stamp get one, persisted first.
	if err := c.stampWhere(ctx, rm, func(ns *v1alpha1.NamespaceStatus) bool {
		return ns.Phase == v1alpha1.NamespaceReverting && ns.RestartedAt == ""
	}, v1alpha1.NamespaceReverting); err != nil {
		return err
	}
	if err := c.drive(ctx, rm, spec, -1, v1alpha1.NamespaceReverting, v1alpha1.NamespaceRolledBack, back); err != nil {
		return err
	}
	for _, ns := range st.Namespaces {
		if ns.Phase == v1alpha1.NamespaceReverting {
			return nil
		}
	}
	n := 0
	for _, ns := range st.Namespaces {
		if ns.Phase == v1alpha1.NamespaceRolledBack {
			n++
		}
	}
	return c.setPhase(ctx, rm, v1alpha1.MigrationAborted, fmt.Sprintf("%d namespaces back on %s; %d never moved", n, spec.From, len(st.Namespaces)-n))
}

func (c *Controller) label(ctx context.Context, ns, value string) error {
	var patch string
	if value == "" {
		patch = fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, LabelRev)
	} else {
		patch = fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, LabelRev, value)
	}
	if _, err := c.cfg.Kube.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("labelling namespace %s %s=%s: %w", ns, LabelRev, value, err)
	}
	c.cfg.Log.Info("namespace retagged", zap.String("namespace", ns), zap.String(LabelRev, value))
	return nil
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

// drive restarts the workloads of namespaces in phase `in` (of wave, or any
// wave when wave < 0) that do not carry their stamp yet, within the rate limit
// and the PDBs, and moves namespaces whose pods are all Ready on t to `done`.
func (c *Controller) drive(ctx context.Context, rm *v1alpha1.RevisionMigration, spec v1alpha1.RevisionMigrationSpec, wave int32, in, done v1alpha1.NamespacePhase, t target) error {
	b := c.bucket(rm.Name, spec.RateLimit.PodsPerSecond)
	st := &rm.Status
	changed := false
	var idx []int
	for i := range st.Namespaces {
		ns := st.Namespaces[i]
		if ns.Phase == in && (wave < 0 || ns.Wave == wave) {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return nil
	}
	snap, err := observe(ctx, c.cfg.Kube)
	if err != nil {
		return err
	}
	sort.SliceStable(idx, func(a, z int) bool { return st.Namespaces[idx[a]].Wave < st.Namespaces[idx[z]].Wave })
	budgetGone := false
	for _, i := range idx {
		ns := &st.Namespaces[i]
		wls := snap.workloads[ns.Name]
		pdbs := snap.pdbs[ns.Name]
		msg := ""
		pending, total := 0, 0
		for _, w := range wls {
			total += w.Pods
			if w.Stamp == ns.RestartedAt {
				continue
			}
			pending++
			if budgetGone {
				continue
			}
			if why := pdbBlock(pdbs, w, wls, ns.RestartedAt); why != "" {
				msg = why
				continue
			}
			ok, wait := b.take(w.Pods, c.cfg.Now())
			if !ok {
				budgetGone = true
				msg = fmt.Sprintf("rate limit: next restart in %s", wait.Round(time.Millisecond))
				continue
			}
			if err := restart(ctx, c.cfg.Kube, w, ns.RestartedAt); err != nil {
				return err
			}
			c.restarts.WithLabelValues(rm.Name).Add(float64(w.Pods))
			c.cfg.Log.Info("workload restarted", zap.String("workload", w.String()), zap.Int("pods", w.Pods), zap.String("restartedAt", ns.RestartedAt))
			pending--
		}
		if ns.Pods != int32(total) {
			ns.Pods, changed = int32(total), true
		}
		if pending == 0 {
			var ready bool
			ready, msg = podsOn(snap.pods[ns.Name], inventory.Namespace{Name: ns.Name}, t.rev, t.version)
			if ready {
				for _, w := range wls {
					if !w.Settled {
						ready, msg = false, fmt.Sprintf("waiting for %s to settle", w)
						break
					}
				}
			}
			if ready {
				ns.Phase, msg = done, fmt.Sprintf("all pods Ready on %s", t.rev)
				c.cfg.Log.Info("namespace done", zap.String("namespace", ns.Name), zap.String("phase", string(done)))
			}
		} else if msg == "" {
			msg = fmt.Sprintf("%d workloads to restart", pending)
		}
		if ns.Message != msg {
			ns.Message, changed = msg, true
		}
		if ns.Phase == done {
			changed = true
		}
	}
	if !changed {
		return nil
	}
	return c.writeStatus(ctx, rm)
}
