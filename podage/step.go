package podage

import (
	"context"
	"fmt"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/istio/freshness"
	"github.com/nodewise/nodewise/revisions"
)

// decide takes one step of a policy: resume and abort, notices, then either
// the wave in flight (restart, settle, judge) or the next wave. What must
// be persisted before an action (a notice sent, a wave's stamps) it writes
// itself; the rest the step writes after it.
func (c *Controller) decide(ctx context.Context, p *v1alpha1.PodAgePolicy, snap *snapshot) error {
	st := &p.Status
	if tok := p.Annotations[revisions.AnnotationResumeToken]; tok != "" && tok != st.ResumeToken {
		st.ResumeToken = tok
		if st.Phase != v1alpha1.PodAgeHalted {
			return nil
		}
		// The halted wave is judged again from a fresh soak; nothing is
		// restarted again for it.
		st.WaveReadyAt = nil
		c.setPhase(p, v1alpha1.PodAgeRestarting, fmt.Sprintf("resumed after a halt: wave %d is judged again from a fresh soak", st.Wave))
		return nil
	}
	if p.Spec.Abort != "" {
		c.setPhase(p, v1alpha1.PodAgeAborted, "aborted: "+p.Spec.Abort+"; nothing more is restarted")
		return nil
	}
	if st.Phase == v1alpha1.PodAgeHalted {
		return nil
	}
	pol, err := parse(p.Spec)
	if err != nil {
		c.setPhase(p, v1alpha1.PodAgeInvalid, err.Error())
		return nil
	}
	covered, err := c.covered(p, snap)
	if err != nil {
		c.setPhase(p, v1alpha1.PodAgeInvalid, err.Error())
		return nil
	}
	now := c.cfg.Now()
	report, err := freshness.Build(c.cfg.Inventory, snap.objects, freshness.Target{MaxMinorsBehind: pol.maxMinorsBehind, MaxAge: pol.maxAge}, pol.keys, now)
	if err != nil {
		return err
	}
	c.track(ctx, snap, covered)
	records, toNotice := merge(st.Workloads, candidates(report, pol, covered), st.Wave)
	st.Workloads = records
	if err := c.notices(ctx, p, pol, toNotice, now); err != nil {
		return err
	}
	if inFlight(st) {
		return c.drive(ctx, p, snap, covered)
	}
	if p.Spec.Paused {
		c.setPhase(p, v1alpha1.PodAgePaused, fmt.Sprintf("paused (spec.paused; nodewise podage resume %s)", p.Name))
		return nil
	}
	if ok, next := pol.open(now); !ok {
		reason := "outside the maintenance windows (" + pol.Windows() + ") and blackouts: no window opens again"
		st.NextWindow = nil
		if !next.IsZero() {
			t := metav1.NewTime(next)
			st.NextWindow = &t
			reason = fmt.Sprintf("outside the maintenance windows (%s) and blackouts; restarts resume at %s", pol.Windows(), next.UTC().Format(time.RFC3339))
		}
		c.setPhase(p, v1alpha1.PodAgeWaiting, reason)
		return nil
	}
	st.NextWindow = nil
	return c.startWave(ctx, p, pol, snap, now)
}

// inFlight: some workload of the current wave is still being restarted or judged.
func inFlight(st *v1alpha1.PodAgePolicyStatus) bool {
	for _, r := range st.Workloads {
		if r.State == v1alpha1.WorkloadRestarting && r.Wave == st.Wave {
			return true
		}
	}
	return false
}

// startWave picks the next wave among the workloads whose notice has run
// out: within the wave size, the PDBs and the restart budgets. It records
// the wave (each workload's stamp) before restarting anything.
func (c *Controller) startWave(ctx context.Context, p *v1alpha1.PodAgePolicy, pol policy, snap *snapshot, now time.Time) error {
	st := &p.Status
	stamp := now.UTC().Format(time.RFC3339Nano)
	cluster := c.bucket(p.Name, p.Spec.RateLimit.PodsPerSecond)
	nsRate := p.Spec.RateLimit.NamespacePodsPerSecond
	if nsRate == 0 {
		nsRate = p.Spec.RateLimit.PodsPerSecond
	}
	// Each namespace's budget starts (empty) when its first workload is
	// recorded, not when its notice runs out, so it has filled by then.
	for _, r := range st.Workloads {
		c.bucket(p.Name+"/"+r.Namespace, nsRate)
	}
	var picked []int
	blocked, budget, waiting := 0, "", 0
	for _, i := range eligible(st.Workloads, pol.notice, now) {
		r := &st.Workloads[i]
		if len(picked) == pol.waveSize || budget != "" {
			waiting++
			continue
		}
		bare := podsOf(snap, *r)
		pods := len(bare)
		why := podPDBBlock(snap.pdbs[r.Namespace], bare)
		if w, ok := workloadOf(snap, *r); ok {
			pods = w.Pods
			why = revisions.PDBBlock(snap.pdbs[r.Namespace], w, snap.workloads[r.Namespace], stamp)
		}
		if why != "" {
			r.State, r.Message = v1alpha1.WorkloadBlocked, why
			blocked++
			continue
		}
		if ok, _ := c.bucket(p.Name+"/"+r.Namespace, nsRate).Take(pods, now); !ok {
			r.Message = fmt.Sprintf("rate limit: waiting for namespace %s's restart budget (%d pods/s)", r.Namespace, nsRate)
			waiting++
			continue
		}
		if ok, _ := cluster.Take(pods, now); !ok {
			budget = fmt.Sprintf("rate limit: waiting for restart budget (%d pods/s)", p.Spec.RateLimit.PodsPerSecond)
			r.Message = budget
			waiting++
			continue
		}
		picked = append(picked, i)
	}
	if len(picked) == 0 {
		reason := fmt.Sprintf("%d workloads miss the target; none is due (notice %s) or allowed now", len(st.Workloads), freshness.Human(pol.notice))
		if blocked > 0 {
			reason = fmt.Sprintf("%d workloads blocked by their PDBs (%s)", blocked, firstMessage(st, v1alpha1.WorkloadBlocked))
		}
		if len(st.Workloads) == 0 {
			reason = "every covered workload meets the target"
		}
		c.setPhase(p, v1alpha1.PodAgeWaiting, reason)
		return nil
	}
	st.Wave++
	t := metav1.NewTime(now)
	st.WaveStartedAt, st.WaveReadyAt = &t, nil
	for _, i := range picked {
		r := &st.Workloads[i]
		r.State, r.RestartedAt, r.Wave, r.Message = v1alpha1.WorkloadRestarting, stamp, st.Wave, "restart recorded"
	}
	st.Phase, st.Reason = v1alpha1.PodAgeRestarting, fmt.Sprintf("wave %d: restarting %d workloads", st.Wave, len(picked))
	if waiting > 0 {
		st.Reason += fmt.Sprintf(" (%d more wait for a later wave)", waiting)
	}
	// Persisted before any restart: a controller restarted from here makes
	// the same restart (the same stamp), never a second.
	if err := c.writeStatus(ctx, p); err != nil {
		return err
	}
	return c.drive(ctx, p, snap, nil)
}

func firstMessage(st *v1alpha1.PodAgePolicyStatus, s v1alpha1.PodAgeWorkloadState) string {
	for _, r := range st.Workloads {
		if r.State == s {
			return fmt.Sprintf("%s %s/%s: %s", r.Kind, r.Namespace, r.Name, r.Message)
		}
	}
	return ""
}

// drive makes the current wave's restarts (idempotent: a restarted
// controller repeats them with the same stamp), waits for its workloads to
// settle, then judges the wave.
func (c *Controller) drive(ctx context.Context, p *v1alpha1.PodAgePolicy, snap *snapshot, covered func(string) bool) error {
	st := &p.Status
	var unsettled []string
	for i := range st.Workloads {
		r := &st.Workloads[i]
		if r.State != v1alpha1.WorkloadRestarting || r.Wave != st.Wave {
			continue
		}
		done, msg, err := c.act(ctx, p.Name, snap, *r)
		if err != nil {
			return err
		}
		r.Message = msg
		if !done {
			unsettled = append(unsettled, fmt.Sprintf("%s %s/%s: %s", r.Kind, r.Namespace, r.Name, msg))
		}
	}
	if len(unsettled) > 0 {
		c.setPhase(p, v1alpha1.PodAgeRestarting, fmt.Sprintf("wave %d: %d workloads restarting (%s)", st.Wave, len(unsettled), unsettled[0]))
		return nil
	}
	if st.WaveReadyAt == nil {
		t := metav1.NewTime(c.cfg.Now())
		st.WaveReadyAt = &t
		if err := c.writeStatus(ctx, p); err != nil {
			return err
		}
	}
	verdict := health.Verdict{Outcome: health.Pass}
	if c.cfg.Gate != nil {
		if covered == nil {
			var err error
			if covered, err = c.covered(p, snap); err != nil {
				return err
			}
		}
		v, err := c.cfg.Gate.Judge(ctx, c.waveInput(p, snap, covered))
		if err != nil {
			v = health.Verdict{Outcome: health.Inconclusive, Reasons: []string{"gate error: " + err.Error()}}
		}
		verdict = v
	}
	switch verdict.Outcome {
	case health.Pass:
		st.Judgement = revisions.JudgementOf(verdict)
		for i := range st.Workloads {
			if r := &st.Workloads[i]; r.State == v1alpha1.WorkloadRestarting && r.Wave == st.Wave {
				r.State, r.Message = v1alpha1.WorkloadRestarted, "restarted; wave passed"
			}
		}
		c.setPhase(p, v1alpha1.PodAgeWaiting, fmt.Sprintf("wave %d passed", st.Wave))
		return nil
	case health.Fail:
		st.Judgement = revisions.JudgementOf(verdict)
		c.setPhase(p, v1alpha1.PodAgeHalted, fmt.Sprintf("wave %d failed its gate: %s (nodewise podage resume %s, or abort)", st.Wave, health.Lead(verdict.Reasons), p.Name))
		return nil
	default:
		c.setPhase(p, v1alpha1.PodAgeGating, fmt.Sprintf("wave %d held by its gate: %s", st.Wave, health.Lead(verdict.Reasons)))
		return nil
	}
}

// waveInput is what the gate judges a wave with: the namespaces of its
// workloads against the policy's other namespaces over the same interval.
func (c *Controller) waveInput(p *v1alpha1.PodAgePolicy, snap *snapshot, covered func(string) bool) revisions.WaveInput {
	st := &p.Status
	in := revisions.WaveInput{Migration: "podagepolicy/" + p.Name, Wave: fmt.Sprintf("wave %d", st.Wave), Spec: p.Spec.Gates}
	if st.WaveStartedAt != nil {
		in.Since = st.WaveStartedAt.Time
	}
	if st.WaveReadyAt != nil {
		in.ReadyAt = st.WaveReadyAt.Time
	}
	wave := map[string]bool{}
	for _, r := range st.Workloads {
		if r.Wave == st.Wave && (r.State == v1alpha1.WorkloadRestarting || r.State == v1alpha1.WorkloadRestarted) {
			wave[r.Namespace] = true
		}
	}
	for _, ns := range snap.objects.Namespaces {
		switch {
		case !covered(ns.Name) || len(snap.pods[ns.Name]) == 0:
		case wave[ns.Name]:
			in.Namespaces = append(in.Namespaces, ns.Name)
		default:
			in.Control = append(in.Control, ns.Name)
		}
	}
	sort.Strings(in.Namespaces)
	sort.Strings(in.Control)
	in.Nodes = nodesOf(snap, covered)
	return in
}

// track gives a NodeTracker gate the nodes of the covered namespaces' pods,
// so its samples reach back before each wave.
func (c *Controller) track(ctx context.Context, snap *snapshot, covered func(string) bool) {
	if t, ok := c.cfg.Gate.(revisions.NodeTracker); ok {
		t.Track(ctx, nodesOf(snap, covered))
	}
}

// nodesOf are the nodes that run a pod of the picked namespaces, sorted.
func nodesOf(snap *snapshot, pick func(string) bool) []string {
	set := map[string]bool{}
	for ns, pods := range snap.pods {
		for _, p := range pods {
			if pick(ns) && p.Spec.NodeName != "" {
				set[p.Spec.NodeName] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
