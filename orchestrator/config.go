package orchestrator

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/client-go/rest"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/istio/skew"
	"github.com/nodewise/nodewise/orchestrator/gate"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/silence"
)

// Config configures the orchestrator. Zero values get the defaults below.
type Config struct {
	// RESTConfig reaches the API server (required).
	RESTConfig *rest.Config
	// Namespace holds the leader Lease (default "nodewise-system").
	Namespace string
	// Identity names this replica in the Lease (default: hostname).
	Identity string
	// Version is this replica's build, written on the Lease while it leads
	// (leader.VersionAnnotation, which `nodewise version` reads); empty: none.
	Version string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's leader
	// election timings (defaults 15 s, 10 s, 2 s).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Resync is how often every NodeRollout is re-planned without an event (default 2 s).
	Resync time.Duration
	// EvictRetryDelay is the wait after a refused eviction (default and minimum 5 s).
	EvictRetryDelay time.Duration
	// MetricsAddr serves /metrics and /healthz when set (e.g. ":8080").
	MetricsAddr string
	// Address is where the other replicas reach this one's metrics server
	// (host:port), written on the leader Lease (leader.Election.Address);
	// empty: none, and a standby waits for the Lease to expire.
	Address string
	// Registry receives the metrics (default: a new registry).
	Registry *prometheus.Registry
	// Logger is the structured logger (default: no-op).
	Logger *zap.Logger
	// Gate judges each node after its soak (default: ReadinessGate).
	Gate gate.Gate
	// Agents reads the node agents' snapshots for drain policy auto, which
	// drains a node only when its agent may see connections older than
	// ztunnel's drain deadline. Nil: auto drains every node (fail safe).
	Agents health.SnapshotSource
	// IstioNamespace holds istiod, whose version preflight checks the target
	// templates against (default istio.DefaultNamespace).
	IstioNamespace string
	// SkewPolicy is the supported version skew between istiod and the
	// ztunnel and istio-cni templates (default skew.DefaultPolicy()).
	SkewPolicy skew.Policy
	// ZtunnelSwap is how ztunnel is swapped on each node: SwapSurge
	// (default; make-before-break, needs pods create/patch in its namespace,
	// deploy/orchestrator/surge-rbac.yaml) or SwapReplace (break-before-make:
	// delete the old pod, the DaemonSet creates the new one once it is gone).
	ZtunnelSwap model.SwapKind
	// KuredNamespace and KuredDaemonSet name Kured's DaemonSet, whose lock
	// annotation a rollout with spec.coordination.kuredLock take holds while
	// it has a node in flight (defaults kube-system, kured: Kured's
	// --ds-namespace and --ds-name). The RBAC allows updating only it.
	KuredNamespace, KuredDaemonSet string
	// KuredLockTTL is the TTL written in that lock, renewed at a quarter of it:
	// Kured takes a lock this long after the last renewal (the orchestrator
	// crashed and none came back). Default 10 m, minimum 2 s.
	KuredLockTTL time.Duration
	// Alertmanager holds a silence over each node's alerts while the node
	// is out (package silence); nil: none.
	Alertmanager *silence.Config
	// HoldAfterPersist, a test hook, makes a worker block forever right after it
	// first persists this step (for a step with no record of its own, as it
	// begins), so a test can kill -9 the process at that point.
	HoldAfterPersist v1alpha1.NodeState
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Validate checks the configuration and fills in its defaults; New calls it.
func (c *Config) Validate() error { return c.validate() }

func (c *Config) validate() error {
	var errs []error
	if c.RESTConfig == nil {
		errs = append(errs, errors.New("RESTConfig: required"))
	}
	if c.Namespace == "" {
		c.Namespace = "nodewise-system"
	}
	if c.IstioNamespace == "" {
		c.IstioNamespace = istio.DefaultNamespace
	}
	if c.SkewPolicy == nil {
		c.SkewPolicy = skew.DefaultPolicy()
	}
	switch c.ZtunnelSwap {
	case "":
		c.ZtunnelSwap = model.SwapSurge
	case model.SwapSurge, model.SwapReplace:
	default:
		errs = append(errs, fmt.Errorf("ZtunnelSwap: %q is not surge or replace", c.ZtunnelSwap))
	}
	if c.KuredNamespace == "" {
		c.KuredNamespace = "kube-system"
	}
	if c.KuredDaemonSet == "" {
		c.KuredDaemonSet = "kured"
	}
	if c.Identity == "" {
		h, err := os.Hostname()
		if err != nil {
			errs = append(errs, fmt.Errorf("Identity: empty and no hostname: %w", err))
		}
		c.Identity = h
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.LeaseDuration, 15*time.Second)
	def(&c.RenewDeadline, 10*time.Second)
	def(&c.RetryPeriod, 2*time.Second)
	def(&c.Resync, 2*time.Second)
	def(&c.EvictRetryDelay, 5*time.Second)
	def(&c.KuredLockTTL, 10*time.Minute)
	if c.KuredLockTTL < 2*time.Second {
		errs = append(errs, fmt.Errorf("KuredLockTTL: %s is below the 2s minimum", c.KuredLockTTL))
	}
	if !(c.LeaseDuration > c.RenewDeadline && c.RenewDeadline > c.RetryPeriod && c.RetryPeriod > 0) {
		errs = append(errs, fmt.Errorf("LeaseDuration %s > RenewDeadline %s > RetryPeriod %s > 0 must hold", c.LeaseDuration, c.RenewDeadline, c.RetryPeriod))
	}
	if c.EvictRetryDelay < 5*time.Second {
		errs = append(errs, fmt.Errorf("EvictRetryDelay: %s is below the 5s minimum", c.EvictRetryDelay))
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
	}
	if c.Alertmanager != nil {
		if err := c.Alertmanager.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("Alertmanager: %w", err))
		}
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return errors.Join(errs...)
}
