package revisions

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/clusters"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/istio/skew"
)

// WaveInput is what an external gate judges: a wave whose pods are all Ready
// on the new proxy version.
type WaveInput struct {
	Migration string
	Wave      string
	// From and To are the migration's revisions.
	From, To   string
	Namespaces []string
	// Since is when the wave started; the gate compares what callers saw since then.
	Since time.Time
	// ReadyAt is when every namespace of the wave was first Ready on the new proxy.
	ReadyAt time.Time
	// Control are the namespaces to compare the wave with over the same
	// interval: those of later waves, not yet migrated, or (for the last
	// wave, ControlMigrated) those of earlier waves.
	Control         []string
	ControlMigrated bool
	// Nodes run the pods of the wave and of the control namespaces.
	Nodes []string
	Spec  *v1alpha1.GatesSpec
}

// Gate is the judge's external gate (for example Prometheus queries of
// caller-side success rate and p99, from package health). A Fail verdict
// halts the migration; Inconclusive or an error holds the wave (fail closed)
// with the reason in status.
type Gate interface {
	Judge(ctx context.Context, in WaveInput) (health.Verdict, error)
}

// GateFunc adapts a function to Gate.
type GateFunc func(ctx context.Context, in WaveInput) (health.Verdict, error)

// Judge implements Gate.
func (f GateFunc) Judge(ctx context.Context, in WaveInput) (health.Verdict, error) { return f(ctx, in) }

// Config configures the controller.
type Config struct {
	Kube       kubernetes.Interface
	Migrations v1alpha1.RevisionMigrationInterface
	Log        *zap.Logger
	Registry   prometheus.Registerer
	// Gate runs after each wave is Ready; nil means readiness alone gates.
	Gate Gate
	// Inventory says where Istio lives (default istio-system).
	Inventory inventory.Options
	// Policy is the skew table (default skew.DefaultPolicy()).
	Policy skew.Policy
	// Interval is how often a live migration is re-examined without an event
	// (default 5s): gates are re-checked and holds re-evaluated.
	Interval time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Events, when set, gets an Event on the RevisionMigration at every phase
	// change (its scheme must include v1alpha1). Status carries the same reasons.
	Events record.EventRecorder
	// Dynamic reads Istio's AuthorizationPolicies for the precheck; nil
	// leaves that check out.
	Dynamic dynamic.Interface
	// Namespace is the controller's own namespace, where the kubeconfig
	// Secrets of spec.promotion's upstream clusters are read. Empty: a
	// migration that asks for promotion waits, since no upstream can be read.
	Namespace string
}

// Controller reconciles RevisionMigrations.
type Controller struct {
	cfg      Config
	restarts *prometheus.CounterVec
	phases   *prometheus.GaugeVec
	halted   *prometheus.GaugeVec
	mu       sync.Mutex
	buckets  map[string]*bucket
	writes   map[string]*writes
	// stamped remembers the restart stamp last written to each workload, so
	// a workload the cache still shows unstamped is not patched again.
	stamped map[string]string
	// upstreams reads spec.promotion's upstream clusters.
	upstreams *clusters.Upstreams
}

// New validates cfg, fills defaults and registers the controller's metrics.
func New(cfg Config) (*Controller, error) {
	switch {
	case cfg.Kube == nil:
		return nil, errors.New("migration: Kube client is required")
	case cfg.Migrations == nil:
		return nil, errors.New("migration: Migrations client is required (v1alpha1.NewForConfig(restConfig).RevisionMigrations())")
	case cfg.Registry == nil:
		return nil, errors.New("migration: Registry is required (inject one; the global registry is not used)")
	case cfg.Interval < 0:
		return nil, errors.New("migration: Interval must be > 0")
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.Policy == nil {
		cfg.Policy = skew.DefaultPolicy()
	}
	if cfg.Interval == 0 {
		cfg.Interval = 5 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Controller{
		cfg: cfg,
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodewise_migration_pod_restarts_total",
			Help: "Pods restarted by RevisionMigrations (the replicas of each restarted workload).",
		}, []string{"migration"}),
		phases: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodewise_migration_namespaces",
			Help: "Namespaces of each RevisionMigration by phase.",
		}, []string{"migration", "phase"}),
		halted: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodewise_migration_halted",
			Help: "1 while the RevisionMigration is Halted (waiting for a person), else 0.",
		}, []string{"migration"}),
		buckets:   map[string]*bucket{},
		writes:    map[string]*writes{},
		stamped:   map[string]string{},
		upstreams: &clusters.Upstreams{Kube: cfg.Kube, Namespace: cfg.Namespace, Now: cfg.Now},
	}
	for _, m := range []prometheus.Collector{c.restarts, c.phases, c.halted} {
		if err := cfg.Registry.Register(m); err != nil {
			return nil, fmt.Errorf("migration: registering metrics: %w", err)
		}
	}
	return c, nil
}

// Run reconciles RevisionMigrations until ctx ends. It reads the cluster
// from informers: any change to a migration, namespace, pod, workload, PDB
// or webhook wakes the live migrations, and a live migration is re-examined
// every Interval without one (gates re-checked, holds re-evaluated) or as
// soon as the restart budget allows its next restart. Run it under leader
// election: one controller acts at a time.
func (c *Controller) Run(ctx context.Context) error {
	cs := newCaches(c)
	q := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 10*time.Second))
	go func() { <-ctx.Done(); q.ShutDown() }()
	wakeAll := func() {
		for _, k := range cs.migrationNames() {
			q.Add(k)
		}
	}
	onAny := cache.ResourceEventHandlerFuncs{AddFunc: func(any) { wakeAll() }, UpdateFunc: func(_, _ any) { wakeAll() }, DeleteFunc: func(any) { wakeAll() }}
	for _, inf := range cs.informers {
		if _, err := inf.AddEventHandler(onAny); err != nil {
			return fmt.Errorf("watching the cluster: %w", err)
		}
	}
	onMigration := func(obj any) {
		if k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			q.Add(k)
		}
	}
	if _, err := cs.migrations.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onMigration, UpdateFunc: func(_, o any) { onMigration(o) }, DeleteFunc: onMigration}); err != nil {
		return fmt.Errorf("watching RevisionMigrations: %w", err)
	}
	if err := cs.start(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	c.cfg.Log.Info("caches synced; reconciling RevisionMigrations")
	for {
		name, quit := q.Get()
		if quit {
			return nil
		}
		after, err := c.sync(ctx, cs, name)
		switch {
		case err != nil && ctx.Err() == nil:
			c.cfg.Log.Info("reconcile did not finish; retrying", zap.String("migration", name), zap.Error(err))
			q.AddRateLimited(name)
		case after > 0:
			q.Forget(name)
			q.AddAfter(name, after)
		default:
			q.Forget(name)
		}
		q.Done(name)
	}
}

// sync reconciles one migration from the caches and says when to look again
// (0: only on the next event).
func (c *Controller) sync(ctx context.Context, cs *caches, name string) (time.Duration, error) {
	rm := cs.migration(name)
	if rm == nil {
		c.forget(name)
		return 0, nil
	}
	if c.superseded(rm) {
		// The cache has not seen our last status write yet; acting on it
		// would only conflict.
		return 50 * time.Millisecond, nil
	}
	snap, err := cs.snapshot(c.cfg.Inventory)
	if err != nil {
		return 0, err
	}
	return c.reconcile(ctx, rm, snap)
}

// superseded is true when rm is a version this controller has since
// overwritten (the informer lags behind the controller's own writes).
func (c *Controller) superseded(rm *v1alpha1.RevisionMigration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.writes[rm.Name]
	if w == nil {
		return false
	}
	if rm.ResourceVersion == w.last {
		delete(c.writes, rm.Name) // caught up
		return false
	}
	return w.old[rm.ResourceVersion]
}

// wrote remembers that the controller replaced version old of rm with new.
func (c *Controller) wrote(name, old, new string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.writes[name]
	if w == nil {
		w = &writes{old: map[string]bool{}}
		c.writes[name] = w
	}
	w.old[old], w.last = true, new
}

func (c *Controller) forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.writes, name)
	delete(c.buckets, name)
}

// writes are the versions of one migration that the controller's own status
// writes replaced, until the informer shows the last one.
type writes struct {
	old  map[string]bool
	last string
}

func (c *Controller) bucket(name string, rate int32) *bucket {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.buckets[name]
	if !ok || b.rate != float64(rate) {
		b = newBucket(rate, c.cfg.Now())
		c.buckets[name] = b
	}
	return b
}

func (c *Controller) observePhases(rm *v1alpha1.RevisionMigration) {
	counts := map[v1alpha1.NamespacePhase]int{}
	for _, ns := range rm.Status.Namespaces {
		counts[ns.Phase]++
	}
	for _, p := range []v1alpha1.NamespacePhase{v1alpha1.NamespacePending, v1alpha1.NamespaceRetagged, v1alpha1.NamespaceRestarting,
		v1alpha1.NamespaceReady, v1alpha1.NamespaceReverting, v1alpha1.NamespaceRolledBack} {
		c.phases.WithLabelValues(rm.Name, string(p)).Set(float64(counts[p]))
	}
	c.halted.WithLabelValues(rm.Name).Set(map[bool]float64{true: 1}[rm.Status.Phase == v1alpha1.MigrationHalted])
}
