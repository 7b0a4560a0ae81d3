package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodewise/nodewise/api/v1alpha1"
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
	w, err := e.syncKuredLock(ctx, locks.KuredHolder(nr.Name), nodes)
	switch w {
	case lockTaken:
		e.recorder.Eventf(nr, corev1.EventTypeNormal, "KuredLockTaken", "holding Kured's lock on DaemonSet %s/%s as %s while node(s) %s are in flight",
			e.cfg.KuredNamespace, e.cfg.KuredDaemonSet, locks.KuredHolder(nr.Name), strings.Join(nodes, ", "))
	case lockReleased:
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

// lockWrite is what syncKuredLock wrote.
type lockWrite int

const (
	lockUnchanged lockWrite = iota
	lockTaken               // the lock did not name the holder before
	lockRenewed             // it did: new nodes or a new created
	lockReleased
)

// syncKuredLock makes Kured's lock hold holder for nodes (none: not at
// all). It decides from the cache and writes only when the lock must change:
// a fresh read, then an update with its resourceVersion (a conflict reads
// again), so an entry Kured wrote meanwhile is never overwritten.
func (e *executor) syncKuredLock(ctx context.Context, holder string, nodes []string) (lockWrite, error) {
	ns, name := e.cfg.KuredNamespace, e.cfg.KuredDaemonSet
	ds, err := e.dss.DaemonSets(ns).Get(name)
	if apierrors.IsNotFound(err) {
		if len(nodes) == 0 {
			return lockUnchanged, nil
		}
		return lockUnchanged, e.kuredElsewhere()
	}
	if err != nil {
		return lockUnchanged, fmt.Errorf("reading Kured's DaemonSet %s/%s: %w", ns, name, err)
	}
	if ch, err := e.kuredLockChange(ds, holder, nodes); err != nil || (!ch.Write && !ch.Remove) {
		if len(nodes) == 0 {
			return lockUnchanged, nil // a lock nodewise cannot read holds nothing of its own (it writes only JSON)
		}
		return lockUnchanged, err
	}
	for range 5 {
		fresh, err := e.kube.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return lockUnchanged, fmt.Errorf("reading Kured's DaemonSet %s/%s: %w", ns, name, err)
		}
		ch, err := e.kuredLockChange(fresh, holder, nodes)
		if err != nil || (!ch.Write && !ch.Remove) {
			return lockUnchanged, err
		}
		had := slices.Contains(locks.NodewiseHolders(fresh.Annotations[locks.AnnotationKured]), holder)
		delete(fresh.Annotations, locks.AnnotationKured)
		if !ch.Remove {
			fresh.SetAnnotations(labels.Merge(fresh.Annotations, labels.Set{locks.AnnotationKured: ch.Value}))
		}
		sent := e.cfg.Now()
		out, err := e.kube.AppsV1().DaemonSets(ns).Update(ctx, fresh, metav1.UpdateOptions{FieldManager: model.FieldManager})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return lockUnchanged, fmt.Errorf("writing Kured's lock on DaemonSet %s/%s: %w", ns, name, err)
		}
		e.kuredClock.Observe(out, model.FieldManager, sent, e.cfg.Now()) // Kured reads created by its clock: the next is the API server's
		switch {
		case len(nodes) == 0:
			e.log.Info("released Kured's lock", zap.String("holder", holder), zap.String("daemonset", ns+"/"+name))
			return lockReleased, nil
		case !had:
			e.log.Info("took Kured's lock", zap.String("holder", holder), zap.Strings("nodes", nodes), zap.String("daemonset", ns+"/"+name))
			return lockTaken, nil
		}
		e.log.Debug("renewed Kured's lock", zap.String("holder", holder), zap.Strings("nodes", nodes), zap.String("value", ch.Value))
		return lockRenewed, nil
	}
	return lockUnchanged, fmt.Errorf("writing Kured's lock on DaemonSet %s/%s: conflicts, 5 times in a row", ns, name)
}

func (e *executor) kuredLockChange(ds *appsv1.DaemonSet, holder string, nodes []string) (locks.KuredChange, error) {
	cur, present := ds.Annotations[locks.AnnotationKured]
	concurrency := 1
	for _, c := range ds.Spec.Template.Spec.Containers {
		concurrency = max(concurrency, locks.KuredConcurrency(append(slices.Clone(c.Command), c.Args...), c.Env))
	}
	return locks.TakeKured(cur, present, locks.KuredWant{
		Holder: holder, Nodes: nodes, MaxOwners: concurrency, TTL: e.cfg.KuredLockTTL, Now: e.kuredClock.Now(e.cfg.Now()),
	})
}

// kuredElsewhere: with no DaemonSet at --kured-daemonset, a Kured lock on
// another DaemonSet is one nodewise may not write (its RBAC names only that
// one), so it fails closed; with none anywhere there is no Kured to hold off.
func (e *executor) kuredElsewhere() error {
	dss, err := e.dss.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("listing DaemonSets for Kured's lock: %w", err)
	}
	for _, ds := range dss {
		if _, ok := ds.Annotations[locks.AnnotationKured]; ok {
			return fmt.Errorf("Kured's lock is on DaemonSet %s/%s, not on %s/%s (the orchestrator's --kured-daemonset): set that flag to it, or spec.coordination.kuredLock: honour",
				ds.Namespace, ds.Name, e.cfg.KuredNamespace, e.cfg.KuredDaemonSet)
		}
	}
	return nil
}

// releaseGoneKuredLocks releases the lock entries of rollouts that are
// gone (deleted after a crash, before their leader let go).
func (e *executor) releaseGoneKuredLocks(ctx context.Context, live map[string]bool) {
	ds, err := e.dss.DaemonSets(e.cfg.KuredNamespace).Get(e.cfg.KuredDaemonSet)
	if err != nil {
		return
	}
	for _, h := range locks.NodewiseHolders(ds.Annotations[locks.AnnotationKured]) {
		if live[h[len(locks.KuredHolderPrefix):]] {
			continue
		}
		if _, err := e.syncKuredLock(ctx, h, nil); err != nil && !errors.Is(err, context.Canceled) {
			e.log.Warn("releasing a gone rollout's Kured lock", zap.String("holder", h), zap.Error(err))
		}
	}
}
