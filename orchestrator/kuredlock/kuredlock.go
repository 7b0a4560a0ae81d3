// Package kuredlock writes Kured's lock on its DaemonSet (the value
// locks.TakeKured decides): a fresh read, then an update with its
// resourceVersion, so an entry Kured wrote meanwhile is never overwritten.
package kuredlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"

	"github.com/nodewise/nodewise/orchestrator/locks"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/observe"
)

// Writer holds and releases Kured's lock on the DaemonSet Namespace/DaemonSet
// (the orchestrator's --kured-daemonset) through Kube, deciding from the
// DaemonSets cache. Clock is the API server's clock Kured's lock is written
// and read by; Sync advances it from each answer.
type Writer struct {
	Kube       kubernetes.Interface
	DaemonSets appslisters.DaemonSetLister
	Namespace  string
	DaemonSet  string
	TTL        time.Duration
	Now        func() time.Time
	Clock      *observe.ServerClock
	Log        *zap.Logger
}

// Write is what Sync wrote.
type Write int

const (
	Unchanged Write = iota
	Taken           // the lock did not name the holder before
	Renewed         // it did: new nodes or a new created
	Released
)

// Sync makes Kured's lock hold holder for nodes (none: not at
// all). It decides from the cache and writes only when the lock must change:
// a fresh read, then an update with its resourceVersion (a conflict reads
// again), so an entry Kured wrote meanwhile is never overwritten.
func (w *Writer) Sync(ctx context.Context, holder string, nodes []string) (Write, error) {
	ns, name := w.Namespace, w.DaemonSet
	ds, err := w.DaemonSets.DaemonSets(ns).Get(name)
	if apierrors.IsNotFound(err) {
		if len(nodes) == 0 {
			return Unchanged, nil
		}
		return Unchanged, w.elsewhere()
	}
	if err != nil {
		return Unchanged, fmt.Errorf("reading Kured's DaemonSet %s/%s: %w", ns, name, err)
	}
	if ch, err := w.change(ds, holder, nodes); err != nil || (!ch.Write && !ch.Remove) {
		if len(nodes) == 0 {
			return Unchanged, nil // a lock nodewise cannot read holds nothing of its own (it writes only JSON)
		}
		return Unchanged, err
	}
	wrote := Unchanged // a write already made, when the clock it read was then measured off
	for range 5 {
		fresh, err := w.Kube.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return wrote, fmt.Errorf("reading Kured's DaemonSet %s/%s: %w", ns, name, err)
		}
		ch, err := w.change(fresh, holder, nodes)
		if err != nil || (!ch.Write && !ch.Remove) {
			return wrote, err
		}
		had := slices.Contains(locks.NodewiseHolders(fresh.Annotations[locks.AnnotationKured]), holder)
		delete(fresh.Annotations, locks.AnnotationKured)
		if !ch.Remove {
			fresh.SetAnnotations(labels.Merge(fresh.Annotations, labels.Set{locks.AnnotationKured: ch.Value}))
		}
		sent := w.Now()
		out, err := w.Kube.AppsV1().DaemonSets(ns).Update(ctx, fresh, metav1.UpdateOptions{FieldManager: model.FieldManager})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return wrote, fmt.Errorf("writing Kured's lock on DaemonSet %s/%s: %w", ns, name, err)
		}
		// Kured reads created by its clock: the API server's, as measured
		// from this answer.
		moved, _ := w.Clock.Observe(out, model.FieldManager, sent, w.Now())
		now := Renewed
		switch {
		case len(nodes) == 0:
			w.Log.Info("released Kured's lock", zap.String("holder", holder), zap.String("daemonset", ns+"/"+name))
			now = Released
		case !had:
			w.Log.Info("took Kured's lock", zap.String("holder", holder), zap.Strings("nodes", nodes), zap.String("daemonset", ns+"/"+name))
			now = Taken
		default:
			w.Log.Debug("renewed Kured's lock", zap.String("holder", holder), zap.Strings("nodes", nodes), zap.String("value", ch.Value))
		}
		if wrote == Unchanged && len(nodes) > 0 && moved > time.Second {
			// created was read from a clock then measured over a second
			// behind the API server's (the first write of this process, or a
			// clock stepped since): Kured would read the lock that much
			// older. Once more, by the measured clock.
			wrote = now
			continue
		}
		if wrote != Unchanged {
			return wrote, nil
		}
		return now, nil
	}
	if wrote != Unchanged {
		return wrote, nil // written, if by the clock before its measure
	}
	return Unchanged, fmt.Errorf("writing Kured's lock on DaemonSet %s/%s: conflicts, 5 times in a row", ns, name)
}

func (w *Writer) change(ds *appsv1.DaemonSet, holder string, nodes []string) (locks.KuredChange, error) {
	cur, present := ds.Annotations[locks.AnnotationKured]
	concurrency := 1
	for _, c := range ds.Spec.Template.Spec.Containers {
		concurrency = max(concurrency, locks.KuredConcurrency(append(slices.Clone(c.Command), c.Args...), c.Env))
	}
	return locks.TakeKured(cur, present, locks.KuredWant{
		Holder: holder, Nodes: nodes, MaxOwners: concurrency, TTL: w.TTL, Now: w.Clock.Now(w.Now()),
	})
}

// elsewhere: with no DaemonSet at --kured-daemonset, a Kured lock on
// another DaemonSet is one nodewise may not write (its RBAC names only that
// one), so it fails closed; with none anywhere there is no Kured to hold off.
func (w *Writer) elsewhere() error {
	dss, err := w.DaemonSets.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("listing DaemonSets for Kured's lock: %w", err)
	}
	for _, ds := range dss {
		if _, ok := ds.Annotations[locks.AnnotationKured]; ok {
			return fmt.Errorf("Kured's lock is on DaemonSet %s/%s, not on %s/%s (the orchestrator's --kured-daemonset): set that flag to it, or spec.coordination.kuredLock: honour",
				ds.Namespace, ds.Name, w.Namespace, w.DaemonSet)
		}
	}
	return nil
}

// ReleaseGone releases the lock entries of rollouts that are
// gone (deleted after a crash, before their leader let go).
func (w *Writer) ReleaseGone(ctx context.Context, live map[string]bool) {
	ds, err := w.DaemonSets.DaemonSets(w.Namespace).Get(w.DaemonSet)
	if err != nil {
		return
	}
	for _, h := range locks.NodewiseHolders(ds.Annotations[locks.AnnotationKured]) {
		if live[h[len(locks.KuredHolderPrefix):]] {
			continue
		}
		if _, err := w.Sync(ctx, h, nil); err != nil && !errors.Is(err, context.Canceled) {
			w.Log.Warn("releasing a gone rollout's Kured lock", zap.String("holder", h), zap.Error(err))
		}
	}
}
