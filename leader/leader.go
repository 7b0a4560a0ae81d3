// Package leader runs a controller only while its replica holds a Lease, and
// serves the process's metrics and health. Both of nodewise's controllers
// (NodeRollouts, RevisionMigrations) use it, each with a Lease of its own.
package leader

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
)

// ErrLost is returned by Run when this replica loses its Lease.
var ErrLost = errors.New("lost the leader lease")

// Election names the Lease a controller campaigns for, and its timings.
// Each controller nodewise runs has its own Lease, so each can run under its
// own ServiceAccount.
type Election struct {
	Client                                    kubernetes.Interface
	Namespace, Name, Identity                 string
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	Log                                       *zap.Logger
	// Version is the build of this replica, written on the Lease with each
	// of its writes (VersionAnnotation) while it holds it; empty writes none.
	Version string
	// Address is where this replica's process answers PresencePath (its
	// metrics server, by an address the other replicas reach: the pod's IP),
	// written on the Lease with each of its writes (AddressAnnotation). A
	// standby follows the holder's presence there and takes over as soon as
	// the holder's process is gone, rather than a lease duration after its
	// last renewal. Empty: none written, and this replica's Lease expires
	// when its process is gone.
	Address string
	// Leading, when set, is told when this replica starts and stops leading.
	Leading func(bool)
	// Guard, when set, is the fence of this replica's writes: told of every
	// acquire and renew this replica makes, and that it stopped leading.
	// Build the leader's clients with Guard.Wrap, and the Lease's without.
	Guard *Guard
}

// Run campaigns for the Lease and runs lead while holding it. It
// returns ErrLost when the Lease is lost, lead's error if lead fails,
// and nil when ctx ends.
func Run(ctx context.Context, le Election, lead func(context.Context) error) error {
	if le.Log == nil {
		le.Log = zap.NewNop()
	}
	if le.Leading == nil {
		le.Leading = func(bool) {}
	}
	if err := leaseNamespaceExists(ctx, le); err != nil {
		return err
	}
	if le.Address != "" {
		if err := reachable(ctx, le.Address, le.Identity); err != nil {
			le.Log.Warn("not writing this replica's address on the leader Lease: a standby will wait for the Lease to expire", zap.String("lease", le.Namespace+"/"+le.Name), zap.Error(err))
			le.Address = ""
		}
	}
	lock := newWatchedLease(le.Client, le.Namespace, le.Name, le.Identity, le.Version, le.Log)
	lock.guard, lock.address = le.Guard, le.Address
	wctx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatch() // after the elector's release, which may read the Lease
	restart := make(chan struct{}, 1)
	lock.holders = newHolderWatch(wctx, le.Identity, le.Log.With(zap.String("lease", le.Namespace+"/"+le.Name)), func() {
		select {
		case restart <- struct{}{}:
		default:
		}
	})
	go lock.run(wctx)
	// Campaign once the watch has synced, so that standing by costs no GETs;
	// a watch that cannot sync (RBAC without list and watch on the Lease) is
	// waited for a lease duration at most, and the lock reads from the API.
	sctx, cancel := context.WithTimeout(ctx, le.LeaseDuration)
	synced := cache.WaitForCacheSync(sctx.Done(), lock.informer.HasSynced)
	cancel()
	if ctx.Err() != nil {
		return nil
	}
	if !synced {
		le.Log.Warn("the leader Lease's watch has not synced; campaigning with reads from the API", zap.String("lease", le.Namespace+"/"+le.Name))
	}
	for {
		led, err := campaign(ctx, le, lock, restart, lead)
		if err != nil || led || ctx.Err() != nil {
			return err
		}
		// Standing by, the holder's process was found gone: a new elector
		// tries at once (client-go's waits a retry period, up to 2.2 of
		// them, between two tries).
	}
}

// campaign runs one elector until ctx ends, this replica stops leading, or
// (standing by) restart is signalled. It reports whether it led, and Run's
// error.
func campaign(ctx context.Context, le Election, lock *watchedLease, restart <-chan struct{}, lead func(context.Context) error) (bool, error) {
	ectx, stop := context.WithCancel(ctx)
	defer stop()
	var mu sync.Mutex
	led := false
	leadErr := make(chan error, 1)
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   le.LeaseDuration,
		RenewDeadline:   le.RenewDeadline,
		RetryPeriod:     le.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            le.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				mu.Lock()
				if lctx.Err() != nil { // stopped for a restart as it took the Lease
					mu.Unlock()
					return
				}
				led = true
				mu.Unlock()
				le.Leading(true)
				le.Log.Info("leading", zap.String("lease", le.Namespace+"/"+le.Name), zap.String("identity", le.Identity))
				leadErr <- lead(lctx)
			},
			OnStoppedLeading: func() { // also when an elector that never led ends
				mu.Lock()
				defer mu.Unlock()
				if !led {
					return
				}
				le.Guard.Lost()
				le.Leading(false)
				le.Log.Info("stopped leading", zap.String("lease", le.Namespace+"/"+le.Name), zap.String("identity", le.Identity))
			},
		},
	})
	if err != nil {
		return false, fmt.Errorf("leader election: %w", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		elector.Run(ectx)
	}()
	select {
	case <-done:
	case <-restart:
		mu.Lock()
		leading := led
		mu.Unlock()
		if !leading {
			stop()
		}
		<-done
	}
	mu.Lock()
	defer mu.Unlock()
	if ctx.Err() != nil {
		return led, nil
	}
	if !led {
		return false, nil
	}
	select {
	case err := <-leadErr:
		if err != nil && !errors.Is(err, context.Canceled) {
			return true, err
		}
	default:
	}
	return true, ErrLost
}

// Check is one health check: nil when healthy, otherwise why not.
type Check func(context.Context) error

// checkTimeout bounds one /healthz answer, every check included.
const checkTimeout = 3 * time.Second

// ServeMetrics serves /metrics from g, /healthz and /livez on addr until the
// returned server is closed. /healthz (readiness) answers 200 "ok" only when
// every check passes, and 503 with the first failure otherwise. /livez
// (liveness) answers "ok" whenever the process serves: an API server outage
// makes a replica unready, and restarting it would not help. With an
// identity, PresencePath answers as that replica (Election.Address).
func ServeMetrics(addr, identity string, g prometheus.Gatherer, log *zap.Logger, checks ...Check) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), checkTimeout)
		defer cancel()
		for _, c := range checks {
			if err := c(ctx); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	if identity != "" {
		mux.HandleFunc(PresencePath, presence(identity))
	}
	srv := &http.Server{Addr: ln.Addr().String(), Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	log.Info("serving metrics", zap.String("addr", ln.Addr().String()))
	return srv, nil
}

// APIReachable checks that the API server answers its /readyz (which every
// authenticated client may read).
func APIReachable(c kubernetes.Interface) Check {
	return func(ctx context.Context) error {
		rc := c.Discovery().RESTClient()
		if rc == nil {
			return nil // a fake clientset: nothing to reach
		}
		if err := rc.Get().AbsPath("/readyz").Do(ctx).Error(); err != nil {
			return fmt.Errorf("the API server is unreachable: %w", err)
		}
		return nil
	}
}

// leaseNamespaceExists says in one line when the Lease's namespace is
// missing, rather than letting the elector retry creating the Lease there
// forever. It asks with a dry-run create, which needs no right beyond the
// Lease's own create.
func leaseNamespaceExists(ctx context.Context, le Election) error {
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: le.Name, Namespace: le.Namespace}}
	_, err := le.Client.CoordinationV1().Leases(le.Namespace).Create(ctx, lease, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	var st apierrors.APIStatus
	if apierrors.IsNotFound(err) && errors.As(err, &st) && st.Status().Details != nil && st.Status().Details.Kind == "namespaces" {
		return fmt.Errorf("the namespace %q for the leader Lease %s does not exist: create it (kubectl apply -k deploy/) or pass --namespace", le.Namespace, le.Name)
	}
	return nil // exists, or another error the elector reports and retries
}
