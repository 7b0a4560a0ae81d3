package revisions

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/istio/skew"
)

// WaveInput is what an external gate judges: a wave whose pods are all Ready
// on the new proxy version.
type WaveInput struct {
	Migration  string
	Wave       string
	Namespaces []string
	// Since is when the wave started; the gate compares what callers saw since then.
	Since time.Time
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
	// Interval between reconciles (default 1s).
	Interval time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Events, when set, gets an Event on the RevisionMigration at every phase
	// change (its scheme must include v1alpha1). Status carries the same reasons.
	Events record.EventRecorder
}

// Controller reconciles RevisionMigrations.
type Controller struct {
	cfg      Config
	restarts *prometheus.CounterVec
	phases   *prometheus.GaugeVec
	mu       sync.Mutex
	buckets  map[string]*bucket
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
		cfg.Interval = time.Second
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
		buckets: map[string]*bucket{},
	}
	for _, m := range []prometheus.Collector{c.restarts, c.phases} {
		if err := cfg.Registry.Register(m); err != nil {
			return nil, fmt.Errorf("migration: registering metrics: %w", err)
		}
	}
	return c, nil
}

// Run reconciles every RevisionMigration each Interval until ctx ends. Run it
// under the orchestrator's leader election: one controller acts at a time.
func (c *Controller) Run(ctx context.Context) error {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		c.ReconcileAll(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// ReconcileAll runs one reconcile of every RevisionMigration.
func (c *Controller) ReconcileAll(ctx context.Context) {
	rms, err := c.cfg.Migrations.List(ctx, metav1.ListOptions{})
	if err != nil {
		c.cfg.Log.Warn("listing RevisionMigrations", zap.Error(err))
		return
	}
	for i := range rms.Items {
		rm := &rms.Items[i]
		if err := c.reconcile(ctx, rm); err != nil && ctx.Err() == nil {
			c.cfg.Log.Info("reconcile did not finish; retrying", zap.String("migration", rm.Name), zap.Error(err))
		}
	}
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
}
