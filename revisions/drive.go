package revisions

import (
	"context"
	"fmt"
	"sort"
	"time"

	"go.uber.org/zap"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio/inventory"
)

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
