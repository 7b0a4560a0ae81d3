package podage

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio/freshness"
	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/notify"
	"github.com/nodewise/nodewise/revisions"
)

// LeaseName is the PodAgePolicy controller's Lease, beside the
// RevisionMigration controller's in the orchestrator's namespace.
const LeaseName = "nodewise-podage"

// Notifier sends an event to a route ("" is the default webhook);
// *notify.Notifier does.
type Notifier interface {
	SendTo(ctx context.Context, route string, e notify.Event) error
}

// Config configures the controller.
type Config struct {
	Kube     kubernetes.Interface
	Policies v1alpha1.PodAgePolicyInterface
	// Notifier sends the notices. Nil: no notice can be sent, so nothing is
	// restarted (each restart needs its notice first).
	Notifier Notifier
	// Gate judges each wave once its workloads are settled (the sidecar
	// wing's: revisions.Gates of the node agents' AgentGate and
	// revisions.SpecGates); nil: readiness alone.
	Gate      revisions.Gate
	Inventory inventory.Options
	// Namespace is the controller's own, where the routes' Secrets are read.
	Namespace string
	// Interval is how often each policy is looked at (default 5s).
	Interval time.Duration
	Now      func() time.Time
	Log      *zap.Logger
	Registry prometheus.Registerer
}

// Controller reconciles PodAgePolicies.
type Controller struct {
	cfg      Config
	restarts *prometheus.CounterVec
	mu       sync.Mutex
	buckets  map[string]*revisions.Bucket // "policy" and "policy/namespace"
}

// New validates cfg, fills defaults and registers the controller's metrics.
func New(cfg Config) (*Controller, error) {
	switch {
	case cfg.Kube == nil:
		return nil, errors.New("podage: Kube client is required")
	case cfg.Policies == nil:
		return nil, errors.New("podage: Policies client is required (v1alpha1.NewForConfig(restConfig).PodAgePolicies())")
	case cfg.Registry == nil:
		return nil, errors.New("podage: Registry is required (inject one; the global registry is not used)")
	case cfg.Interval < 0:
		return nil, errors.New("podage: Interval must be > 0")
	}
	if cfg.Interval == 0 {
		cfg.Interval = 5 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	c := &Controller{cfg: cfg, buckets: map[string]*revisions.Bucket{},
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nodewise_podage_pod_restarts_total",
			Help: "Pods restarted or evicted by PodAgePolicies.",
		}, []string{"policy"})}
	if err := cfg.Registry.Register(c.restarts); err != nil {
		return nil, fmt.Errorf("podage: registering metrics: %w", err)
	}
	return c, nil
}

// Run looks at every PodAgePolicy each Interval until ctx ends. Run it
// under leader election: one controller acts at a time.
func (c *Controller) Run(ctx context.Context) error {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		if err := c.Pass(ctx); err != nil && ctx.Err() == nil {
			c.cfg.Log.Info("pass did not finish; retrying", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Pass reads the cluster once and takes one step of every policy.
func (c *Controller) Pass(ctx context.Context) error {
	list, err := c.cfg.Policies.List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return nil // the CRD is not installed: no policy
	}
	if err != nil {
		return fmt.Errorf("listing PodAgePolicies: %w", err)
	}
	if len(list.Items) == 0 {
		return nil
	}
	snap, err := c.observe(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for i := range list.Items {
		p := &list.Items[i]
		if err := c.step(ctx, p, snap); err != nil {
			errs = append(errs, fmt.Errorf("policy %s: %w", p.Name, err))
		}
	}
	return errors.Join(errs...)
}

// snapshot is what one pass sees.
type snapshot struct {
	objects   freshness.Objects
	workloads map[string][]revisions.Workload
	pdbs      map[string][]policyv1.PodDisruptionBudget
	pods      map[string][]corev1.Pod
}

func (c *Controller) observe(ctx context.Context) (*snapshot, error) {
	o, err := freshness.List(ctx, c.cfg.Kube, c.cfg.Inventory)
	if err != nil {
		return nil, err
	}
	pdbs, err := c.cfg.Kube.PolicyV1().PodDisruptionBudgets(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing poddisruptionbudgets: %w", err)
	}
	s := &snapshot{objects: o, workloads: revisions.WorkloadsOf(o.Deployments, o.StatefulSets, o.DaemonSets),
		pdbs: map[string][]policyv1.PodDisruptionBudget{}, pods: map[string][]corev1.Pod{}}
	for _, p := range pdbs.Items {
		s.pdbs[p.Namespace] = append(s.pdbs[p.Namespace], p)
	}
	for _, p := range o.Pods {
		s.pods[p.Namespace] = append(s.pods[p.Namespace], p)
	}
	return s, nil
}

// covered says which namespaces a policy covers: those its selector picks,
// never Istio's own or kube-*.
func (c *Controller) covered(p *v1alpha1.PodAgePolicy, snap *snapshot) (func(string) bool, error) {
	sel := labels.Everything()
	if p.Spec.NamespaceSelector != nil {
		s, err := metav1.LabelSelectorAsSelector(p.Spec.NamespaceSelector)
		if err != nil {
			return nil, fmt.Errorf("spec.namespaceSelector: %w", err)
		}
		sel = s
	}
	istioNS := c.cfg.Inventory.IstioNamespace
	if istioNS == "" {
		istioNS = "istio-system"
	}
	ok := map[string]bool{}
	for _, ns := range snap.objects.Namespaces {
		if ns.Name != istioNS && !strings.HasPrefix(ns.Name, "kube-") && sel.Matches(labels.Set(ns.Labels)) {
			ok[ns.Name] = true
		}
	}
	return func(ns string) bool { return ok[ns] }, nil
}

// writeStatus persists p.Status with p's resourceVersion (a conflict fails
// the step, which the next pass retries from a fresh read) and adopts the result.
func (c *Controller) writeStatus(ctx context.Context, p *v1alpha1.PodAgePolicy) error {
	p.Status.ObservedGeneration = p.Generation
	out, err := c.cfg.Policies.UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("writing status of %s: %w", p.Name, err)
	}
	*p = *out
	return nil
}

// setPhase records a phase and its reason; the step writes the status at
// its end when anything changed.
func (c *Controller) setPhase(p *v1alpha1.PodAgePolicy, ph v1alpha1.PodAgePhase, reason string) {
	if p.Status.Phase != ph {
		c.cfg.Log.Info("pod age policy phase", zap.String("policy", p.Name), zap.String("phase", string(ph)), zap.String("reason", reason))
	}
	p.Status.Phase, p.Status.Reason = ph, reason
}

// step takes one step of a policy and writes its status when the step
// changed it (or the spec is not yet observed).
func (c *Controller) step(ctx context.Context, p *v1alpha1.PodAgePolicy, snap *snapshot) error {
	before := p.Status.DeepCopy()
	if err := c.decide(ctx, p, snap); err != nil {
		return err
	}
	if equality.Semantic.DeepEqual(before, &p.Status) && p.Status.ObservedGeneration == p.Generation {
		return nil
	}
	return c.writeStatus(ctx, p)
}

func (c *Controller) bucket(scope string, rate int32) *revisions.Bucket {
	key := fmt.Sprintf("%s@%d", scope, rate) // a new rate starts a new, empty bucket
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.buckets[key]
	if !ok {
		b = revisions.NewBucket(rate, c.cfg.Now())
		c.buckets[key] = b
	}
	return b
}
