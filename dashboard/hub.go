package dashboard

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// listWatcher is the read a hub needs of one resource.
type listWatcher[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// Topics name what changed in events: "NodeRollout/NAME" or
// "RevisionMigration/NAME".
const (
	kindRollout   = "NodeRollout"
	kindMigration = "RevisionMigration"
)

// hub holds the process's one informer per resource and fans their changes
// out to every open page. A page never blocks an informer: its pending
// topics coalesce until it takes them.
type hub struct {
	rollouts, migrations cache.SharedIndexInformer
	// rolloutErr is the last error listing or watching NodeRollouts.
	rolloutErr atomic.Pointer[error]

	mu   sync.Mutex
	subs map[*subscription]struct{}
}

// subscription is one open page's stream of changes.
type subscription struct {
	h       *hub
	notify  chan struct{} // capacity 1: "something is pending"
	pending map[string]bool
}

func newHub(rollouts listWatcher[*v1alpha1.NodeRolloutList], migrations listWatcher[*v1alpha1.RevisionMigrationList], log *zap.Logger) *hub {
	h := &hub{subs: map[*subscription]struct{}{}}
	h.rollouts = newInformer(rollouts, &v1alpha1.NodeRollout{}, kindRollout, h.publish)
	_ = h.rollouts.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		h.rolloutErr.Store(&err)
		log.Warn("listing or watching NodeRollouts", zap.Error(err))
	})
	if migrations != nil {
		h.migrations = newInformer(migrations, &v1alpha1.RevisionMigration{}, kindMigration, h.publish)
		// A cluster without their CRD, or credentials that may not read
		// them, is expected: the list page says so; the log keeps it quiet.
		_ = h.migrations.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
			log.Debug("listing or watching RevisionMigrations", zap.Error(err))
		})
	}
	return h
}

func newInformer[L runtime.Object](c listWatcher[L], obj runtime.Object, kind string, publish func(string)) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return c.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return c.Watch(ctx, opts)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, obj, 0, cache.Indexers{})
	_ = inf.SetTransform(func(o any) (any, error) { // the page never shows managedFields
		if a, err := meta.Accessor(o); err == nil {
			a.SetManagedFields(nil)
		}
		return o, nil
	})
	topic := func(o any) {
		if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
			o = d.Obj
		}
		if a, err := meta.Accessor(o); err == nil {
			publish(kind + "/" + a.GetName())
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    topic,
		UpdateFunc: func(_, o any) { topic(o) },
		DeleteFunc: topic,
	})
	return inf
}

// run starts the informers and waits until the NodeRollouts are listed.
// RevisionMigrations are not waited for: a cluster without their CRD, or
// credentials that may not read them, still gets its rollouts, and the
// list page says the migrations are not readable.
func (h *hub) run(ctx context.Context) error {
	go h.rollouts.RunWithContext(ctx)
	if h.migrations != nil {
		go h.migrations.RunWithContext(ctx)
	}
	for tick := time.NewTicker(50 * time.Millisecond); !h.rollouts.HasSynced(); {
		select {
		case <-ctx.Done():
			tick.Stop()
			return fmt.Errorf("listing NodeRollouts: %w", context.Cause(ctx))
		case <-tick.C:
		}
		if err := h.rolloutErr.Load(); err != nil && !h.rollouts.HasSynced() {
			tick.Stop()
			return fmt.Errorf("listing NodeRollouts: %w", *err)
		}
	}
	return nil
}

func (h *hub) synced() bool { return h.rollouts.HasSynced() }

// migrationsListed says whether the RevisionMigrations have been listed.
func (h *hub) migrationsListed() bool { return h.migrations != nil && h.migrations.HasSynced() }

func (h *hub) publish(topic string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		s.pending[topic] = true
		select {
		case s.notify <- struct{}{}:
		default:
		}
	}
}

func (h *hub) subscribe() *subscription {
	s := &subscription{h: h, notify: make(chan struct{}, 1), pending: map[string]bool{}}
	h.mu.Lock()
	h.subs[s] = struct{}{}
	h.mu.Unlock()
	return s
}

// take returns the topics changed since the last take, sorted.
func (s *subscription) take() []string {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	out := make([]string, 0, len(s.pending))
	for t := range s.pending {
		out = append(out, t)
	}
	clear(s.pending)
	sort.Strings(out)
	return out
}

func (s *subscription) close() {
	s.h.mu.Lock()
	delete(s.h.subs, s)
	s.h.mu.Unlock()
}

// rollout is the cached NodeRollout name (never to be mutated), or nil.
func (h *hub) rollout(name string) *v1alpha1.NodeRollout {
	o, ok, err := h.rollouts.GetStore().GetByKey(name)
	if err != nil || !ok {
		return nil
	}
	return o.(*v1alpha1.NodeRollout)
}

func (h *hub) migration(name string) *v1alpha1.RevisionMigration {
	if !h.migrationsListed() {
		return nil
	}
	o, ok, err := h.migrations.GetStore().GetByKey(name)
	if err != nil || !ok {
		return nil
	}
	return o.(*v1alpha1.RevisionMigration)
}

func (h *hub) allRollouts() []*v1alpha1.NodeRollout {
	var out []*v1alpha1.NodeRollout
	for _, o := range h.rollouts.GetStore().List() {
		out = append(out, o.(*v1alpha1.NodeRollout))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (h *hub) allMigrations() []*v1alpha1.RevisionMigration {
	if !h.migrationsListed() {
		return nil
	}
	var out []*v1alpha1.RevisionMigration
	for _, o := range h.migrations.GetStore().List() {
		out = append(out, o.(*v1alpha1.RevisionMigration))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
