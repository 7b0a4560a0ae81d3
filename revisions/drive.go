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
//
// It returns how long until the restart budget allows the next restart (or
// Interval when nothing waits on it).
func (c *Controller) drive(ctx context.Context, rm *v1alpha1.RevisionMigration, spec v1alpha1.RevisionMigrationSpec, snap *snapshot, wave int32, in, done v1alpha1.NamespacePhase, t target) (time.Duration, error) {
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
		return c.cfg.Interval, nil
	}
	next := c.cfg.Interval
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
			if w.Stamp == ns.RestartedAt || c.wasStamped(w, ns.RestartedAt) {
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
				next = min(next, max(wait, 10*time.Millisecond))
				// A stable message: status is written only when it changes.
				msg = fmt.Sprintf("rate limit: waiting for restart budget (%d pods/s)", spec.RateLimit.PodsPerSecond)
				continue
			}
			if err := restart(ctx, c.cfg.Kube, w, ns.RestartedAt); err != nil {
				return 0, err
			}
			c.markStamped(w, ns.RestartedAt)
			c.restarts.WithLabelValues(rm.Name).Add(float64(w.Pods))
			c.cfg.Log.Info("workload restarted", zap.String("workload", w.String()), zap.Int("pods", w.Pods), zap.String("restartedAt", ns.RestartedAt))
			pending--
		}
		if ns.Pods != int32(total) {
			ns.Pods, changed = int32(total), true
		}
		if done == v1alpha1.NamespaceReady {
			if why := wrongProxy(snap.pods[ns.Name], inventory.Namespace{Name: ns.Name}, t.rev, t.version, ns.RestartedAt); why != "" {
				return 0, errWrongProxy{reason: why}
			}
		}
		if pending == 0 {
			var ready bool
			ready, msg = podsOn(snap.pods[ns.Name], inventory.Namespace{Name: ns.Name}, t.rev, t.version, total)
			if ready {
				for _, w := range wls {
					if w.Stamp != ns.RestartedAt {
						// Restarted by this controller, not yet in the cache.
						ready, msg = false, fmt.Sprintf("waiting for %s to show its restart", w)
						break
					}
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
		return next, nil
	}
	return next, c.writeStatus(ctx, rm)
}

// wasStamped: this controller has patched w with stamp, whatever the cache shows yet.
func (c *Controller) wasStamped(w workload, stamp string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stamped[w.String()] == stamp
}

func (c *Controller) markStamped(w workload, stamp string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stamped[w.String()] = stamp
}
