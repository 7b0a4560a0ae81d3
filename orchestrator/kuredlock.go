package orchestrator

import (
	"context"
	"maps"
	"slices"
	"strings"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/kuredlock"
	"github.com/nodewise/nodewise/orchestrator/locks"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/planner"
)

// holdKuredLock holds Kured's lock (locks.TakeKured) for the
// rollout's nodes in flight and those the plan starts now, or releases it
// when there are none (or the rollout only honours Kured's lock). The lock
// itself is the record: it names the rollout (nodewise:<rollout>), so a new
// leader finds it, keeps it while the rollout's nodes are in flight and
// releases it once they are not. When the lock cannot be held, the plan's
// starts are dropped: those nodes wait (fail closed) and say why; nodes
// already in flight finish.
func (e *executor) holdKuredLock(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, snap model.Snapshot, d planner.Decision) planner.Decision {
	var nodes []string
	if p.TakeKuredLock {
		for _, n := range snap.Nodes {
			if model.InFlight(n.State) {
				nodes = append(nodes, n.Name)
			}
		}
		for _, a := range d.Actions {
			if starts(a) && !slices.Contains(nodes, a.Node) {
				nodes = append(nodes, a.Node)
			}
		}
		slices.Sort(nodes)
	}
	w, err := e.kured().Sync(ctx, locks.KuredHolder(nr.Name), nodes)
	switch w {
	case kuredlock.Taken:
		e.recorder.Eventf(nr, corev1.EventTypeNormal, "KuredLockTaken", "holding Kured's lock on DaemonSet %s/%s as %s while node(s) %s are in flight",
			e.cfg.KuredNamespace, e.cfg.KuredDaemonSet, locks.KuredHolder(nr.Name), strings.Join(nodes, ", "))
	case kuredlock.Released:
		e.recorder.Eventf(nr, corev1.EventTypeNormal, "KuredLockReleased", "released Kured's lock on DaemonSet %s/%s: no node in flight",
			e.cfg.KuredNamespace, e.cfg.KuredDaemonSet)
	}
	if err == nil {
		return d
	}
	if len(nodes) == 0 {
		e.log.Warn("releasing Kured's lock", zap.String("rollout", nr.Name), zap.Error(err))
		return d
	}
	why := "Kured's lock cannot be taken: " + planner.OneLine(err)
	held := make(map[string]string, len(d.Held))
	maps.Copy(held, d.Held)
	d.Actions = slices.DeleteFunc(d.Actions, func(a planner.Action) bool {
		if starts(a) && !inFlightIn(snap, a.Node) {
			held[a.Node] = why
			return true
		}
		return false
	})
	d.Held = held
	d.Reason += "; no node starts: " + why
	return d
}

// starts: the action takes a node out of service (its worker cordons it).
func starts(a planner.Action) bool {
	return a.Kind == planner.ActStart || a.Kind == planner.ActRollback
}

func inFlightIn(s model.Snapshot, node string) bool {
	return slices.ContainsFunc(s.Nodes, func(n model.NodeView) bool { return n.Name == node && model.InFlight(n.State) })
}

// kured is the writer of Kured's lock, over the executor's client and caches.
func (e *executor) kured() *kuredlock.Writer {
	return &kuredlock.Writer{
		Kube: e.kube, DaemonSets: e.dss, Namespace: e.cfg.KuredNamespace, DaemonSet: e.cfg.KuredDaemonSet,
		TTL: e.cfg.KuredLockTTL, Now: e.cfg.Now, Clock: &e.kuredClock, Log: e.log,
	}
}
