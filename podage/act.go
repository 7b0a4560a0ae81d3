package podage

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/notify"
	"github.com/nodewise/nodewise/revisions"
)

// notices tells each team, through its route, which of its workloads will
// be restarted and from when, and records each notice (persisted at once:
// the notice period runs from it).
func (c *Controller) notices(ctx context.Context, p *v1alpha1.PodAgePolicy, pol policy, cands []candidate, now time.Time) error {
	if len(cands) == 0 {
		return nil
	}
	if c.cfg.Notifier == nil {
		c.setPhase(p, v1alpha1.PodAgeWaiting, fmt.Sprintf("%d workloads miss the target but no notifier is configured (--notify-webhook): nothing restarts without a notice", len(cands)))
		return nil
	}
	byTeam := map[string][]candidate{}
	for _, cd := range cands {
		byTeam[cd.team] = append(byTeam[cd.team], cd)
	}
	teams := make([]string, 0, len(byTeam))
	for t := range byTeam {
		teams = append(teams, t)
	}
	sort.Strings(teams)
	from := now.Add(pol.notice)
	if ok, next := pol.open(from); !ok && !next.IsZero() {
		from = next
	}
	sent := 0
	for _, team := range teams {
		route, err := c.route(ctx, p, team)
		if err != nil {
			c.cfg.Log.Info("no route for a team's notice", zap.String("policy", p.Name), zap.String("team", team), zap.Error(err))
			continue
		}
		var refs []string
		for _, cd := range byTeam[team] {
			refs = append(refs, cd.key())
		}
		e := notify.Event{Kind: notify.Notice, Policy: p.Name, Team: team, Workloads: refs, Time: now,
			Headline: fmt.Sprintf("from %s, in its windows (%s): %s", from.UTC().Format(time.RFC3339), pol.Windows(), byTeam[team][0].why)}
		if err := c.cfg.Notifier.SendTo(ctx, route, e); err != nil {
			c.cfg.Log.Info("notice not delivered; retrying next pass", zap.String("policy", p.Name), zap.String("team", team), zap.Error(err))
			continue
		}
		t := metav1.NewTime(now)
		for _, cd := range byTeam[team] {
			p.Status.Workloads = append(p.Status.Workloads, v1alpha1.PodAgeWorkload{Namespace: cd.namespace, Kind: cd.kind, Name: cd.name,
				Team: cd.team, Owner: cd.owner, Why: cd.why, State: v1alpha1.WorkloadNoticed, NoticeSentAt: &t,
				Message: "notice sent; restart from " + from.UTC().Format(time.RFC3339)})
		}
		sent++
	}
	if sent == 0 {
		return nil
	}
	sort.SliceStable(p.Status.Workloads, func(i, j int) bool { return recordKey(p.Status.Workloads[i]) < recordKey(p.Status.Workloads[j]) })
	return c.writeStatus(ctx, p)
}

// route is a team's webhook from its Secret, or "" (the default webhook).
func (c *Controller) route(ctx context.Context, p *v1alpha1.PodAgePolicy, team string) (string, error) {
	for _, r := range p.Spec.Routes {
		if r.Team != team {
			continue
		}
		key := r.Key
		if key == "" {
			key = "url"
		}
		s, err := c.cfg.Kube.CoreV1().Secrets(c.cfg.Namespace).Get(ctx, r.Secret, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("reading the route Secret %s/%s of team %s: %w", c.cfg.Namespace, r.Secret, team, err)
		}
		u := strings.TrimSpace(string(s.Data[key]))
		if u == "" {
			return "", fmt.Errorf("the route Secret %s/%s of team %s has no %q", c.cfg.Namespace, r.Secret, team, key)
		}
		return u, nil
	}
	return "", nil
}

// podPDBBlock says why evicting pods now would break a PDB, or "": a
// budget over any of them that allows fewer disruptions than there are pods.
// It is pure.
func podPDBBlock(pdbs []policyv1.PodDisruptionBudget, pods []corev1.Pod) string {
	for _, b := range pdbs {
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil || sel.Empty() {
			continue
		}
		n := 0
		for _, p := range pods {
			if sel.Matches(labels.Set(p.Labels)) {
				n++
			}
		}
		if n > 0 && int(b.Status.DisruptionsAllowed) < n {
			return fmt.Sprintf("PDB %s/%s allows %d disruptions and %d pods would be evicted", b.Namespace, b.Name, b.Status.DisruptionsAllowed, n)
		}
	}
	return ""
}

// workloadOf finds a record's Deployment, StatefulSet or DaemonSet.
func workloadOf(snap *snapshot, r v1alpha1.PodAgeWorkload) (revisions.Workload, bool) {
	for _, w := range snap.workloads[r.Namespace] {
		if w.Kind == r.Kind && w.Name == r.Name {
			return w, true
		}
	}
	return revisions.Workload{}, false
}

// podsOf are the live pods of a record that has no rollout of its own: the
// bare pod itself, or the pods its controller (a ReplicaSet without a
// Deployment, a Job...) owns.
func podsOf(snap *snapshot, r v1alpha1.PodAgeWorkload) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range snap.pods[r.Namespace] {
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		c := metav1.GetControllerOfNoCopy(&p)
		if (r.Kind == "Pod" && c == nil && p.Name == r.Name) || (c != nil && c.Kind == r.Kind && c.Name == r.Name) {
			out = append(out, p)
		}
	}
	return out
}

// act makes a wave's restart of one record (again, harmlessly, after a
// controller restart) and says whether it is done: a rollout restarted and
// settled, or every pod evicted. A refused eviction (a PDB) is not an
// error: it is retried next pass, with the refusal as the message.
func (c *Controller) act(ctx context.Context, policy string, snap *snapshot, r v1alpha1.PodAgeWorkload) (bool, string, error) {
	if w, ok := workloadOf(snap, r); ok {
		if w.Stamp != r.RestartedAt {
			if err := revisions.Restart(ctx, c.cfg.Kube, w, r.RestartedAt); err != nil {
				return false, "", err
			}
			c.restarts.WithLabelValues(policy).Add(float64(w.Pods))
			c.cfg.Log.Info("workload restarted", zap.String("policy", policy), zap.String("workload", w.String()), zap.String("restartedAt", r.RestartedAt))
			return false, "restarted; waiting for it to show its restart", nil
		}
		if !w.Settled {
			return false, "waiting for its rollout to settle", nil
		}
		return true, "restarted and settled", nil
	}
	if r.Kind == "Deployment" || r.Kind == "StatefulSet" || r.Kind == "DaemonSet" {
		return true, "gone", nil
	}
	pods := podsOf(snap, r)
	refused := ""
	for _, p := range pods {
		err := c.cfg.Kube.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name}})
		switch {
		case err == nil:
			c.restarts.WithLabelValues(policy).Inc()
			c.cfg.Log.Info("pod evicted", zap.String("policy", policy), zap.String("pod", p.Namespace+"/"+p.Name))
		case apierrors.IsNotFound(err):
		case apierrors.IsTooManyRequests(err):
			refused = fmt.Sprintf("eviction of %s refused (its PDB allows no disruption now): %v", p.Name, err)
		default:
			return false, "", fmt.Errorf("evicting %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	switch {
	case refused != "":
		return false, refused, nil
	case len(pods) > 0:
		return false, fmt.Sprintf("evicted %d pods; waiting for them to go", len(pods)), nil
	}
	return true, "evicted", nil
}
