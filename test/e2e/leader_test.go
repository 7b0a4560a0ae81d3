package e2e

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dtomodel "github.com/prometheus/client_model/go"
	"go.uber.org/zap/zaptest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/leader"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/sim/cluster"
)

type dto = dtomodel.MetricFamily

// writes sums the orchestrator's write requests (create/update/patch/delete),
// leaving out its own Lease.
func writes(fams map[string]*dto) float64 {
	var n float64
	for _, m := range fams["nodewise_api_requests_total"].GetMetric() {
		l := labelMap(m.GetLabel())
		if l["resource"] == "leases" {
			continue
		}
		switch l["verb"] {
		case "create", "update", "patch", "delete":
			n += m.GetCounter().GetValue()
		}
	}
	return n
}

// TestOnlyLeaderWrites runs two replicas: only the Lease holder writes, and
// killing it hands over before its lease runs out.
func TestOnlyLeaderWrites(t *testing.T) {
	const nodes = 6
	e := newEnv(t, nodes, 2)
	addrA, addrB := freeAddr(t), freeAddr(t)
	a := e.startProcess("replica-a", addrA)
	waitHolder(t, e, "replica-a")
	b := e.startProcess("replica-b", addrB)
	_ = b
	e.upgrade("1.28.1")
	e.apply(rollout("leader", func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
		s.Soak = &v1alpha1.Duration{Duration: 2 * time.Second}
	}))
	e.waitStep("leader", v1alpha1.NodeSoak)
	if w := writes(scrape(t, addrB)); w != 0 {
		t.Fatalf("standby replica made %v write requests", w)
	}
	if w := writes(scrape(t, addrA)); w == 0 {
		t.Fatal("leader made no write requests: the check cannot tell them apart")
	}
	if r := leaseReads(scrape(t, addrB)); r != 0 {
		t.Errorf("standby replica read its Lease %v times with GET or LIST, want none: it watches it", r)
	}
	old, err := e.c.Client.CoordinationV1().Leases("default").Get(context.Background(), model.LeaseName, metav1.GetOptions{})
	if err != nil || old.Spec.RenewTime == nil {
		t.Fatalf("reading the lease: %v", err)
	}
	a.kill()
	lease := waitHolder(t, e, "replica-b")
	if lease.Spec.AcquireTime == nil {
		t.Fatal("lease has no acquire time")
	}
	// Handover, from the Lease's own timestamps: the standby follows
	// replica-a's presence at the address on the Lease, and takes over once
	// its process is gone, before the lease (4 s) runs out.
	if addr := old.Annotations[leader.AddressAnnotation]; addr != addrA {
		t.Errorf("the leader's Lease gives its address as %q, want %q (its --metrics-addr)", addr, addrA)
	}
	gap := lease.Spec.AcquireTime.Sub(old.Spec.RenewTime.Time)
	t.Logf("handover: last renewal by replica-a → acquisition by replica-b = %s (lease 4s, retry 500ms)", gap)
	if gap >= 4*time.Second {
		t.Errorf("handover took %s after the last renewal: the standby waited for the lease to run out, though replica-a's process was gone", gap)
	}
	e.waitPhase("leader", 4*time.Minute, v1alpha1.PhaseCompleted)
	e.assertAllOnNewest(nodes)
	if w := writes(scrape(t, addrB)); w == 0 {
		t.Fatal("new leader made no writes")
	}
}

type leaseView struct {
	Spec struct {
		AcquireTime *metav1.MicroTime
	}
}

func waitHolder(t testing.TB, e *env, id string) leaseView {
	t.Helper()
	return waitHolderWithin(t, e, id, time.Minute)
}

// waitHolderWithin waits up to limit for id to hold the orchestrator's Lease.
func waitHolderWithin(t testing.TB, e *env, id string, limit time.Duration) leaseView {
	t.Helper()
	var lv leaseView
	start := time.Now()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, limit, true, func(ctx context.Context) (bool, error) {
		l, err := e.c.Client.CoordinationV1().Leases("default").Get(ctx, model.LeaseName, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false, nil
		}
		lv.Spec.AcquireTime = l.Spec.AcquireTime
		return *l.Spec.HolderIdentity == id, nil
	})
	if err != nil {
		t.Fatalf("%s never held the lease", id)
	}
	t.Logf("%s holds the lease after %s", id, time.Since(start).Round(100*time.Millisecond))
	return lv
}

// leaseCandidate is one replica campaigning with leader.Run over a client
// that counts its reads of Leases, and that can die: once dead, every
// request it makes fails, so it neither renews nor releases.
type leaseCandidate struct {
	id            string
	gets, lists   atomic.Int64
	dead          atomic.Bool
	mu            sync.Mutex
	started, lost []time.Time
	done          chan error
}

func (lc *leaseCandidate) RoundTrip(next http.RoundTripper, r *http.Request) (*http.Response, error) {
	if lc.dead.Load() {
		return nil, errors.New(lc.id + " is dead")
	}
	if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/leases") {
		q := r.URL.Query().Get("watch")
		switch {
		case !strings.HasSuffix(r.URL.Path, "/leases"):
			lc.gets.Add(1)
		case q != "true" && q != "1":
			lc.lists.Add(1)
		}
	}
	return next.RoundTrip(r)
}

func (lc *leaseCandidate) leading() bool {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return len(lc.started) > len(lc.lost)
}

// campaign starts lc on the Lease name in default (lease 2 s, renew
// deadline 1.5 s, retry 200 ms) until ctx ends.
func campaign(ctx context.Context, t *testing.T, cfg *rest.Config, name string, lc *leaseCandidate) {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) { return lc.RoundTrip(next, r) })
	})
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lc.done = make(chan error, 1)
	go func() {
		lc.done <- leader.Run(ctx, leader.Election{
			Client: client, Namespace: "default", Name: name, Identity: lc.id,
			LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond,
			Log: zaptest.NewLogger(t).Named(lc.id),
			Leading: func(on bool) {
				lc.mu.Lock()
				defer lc.mu.Unlock()
				if on {
					lc.started = append(lc.started, time.Now())
				} else {
					lc.lost = append(lc.lost, time.Now())
				}
			},
		}, func(lctx context.Context) error { <-lctx.Done(); return nil })
	}()
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func waitLeading(t *testing.T, lc *leaseCandidate, within time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if lc.leading() {
			lc.mu.Lock()
			defer lc.mu.Unlock()
			return lc.started[len(lc.started)-1]
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s did not lead within %s", lc.id, within)
	return time.Time{}
}

// TestStandbyWatchesTheLease: a standby reads the Lease from a watch, not
// with a GET every retry period (15 in these 3 s with client-go's
// LeaseLock); when the leader dies (no renewal, no release) the standby
// takes over within the lease duration of its last renewal, and the dead
// leader had stopped leading before the standby started.
func TestStandbyWatchesTheLease(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Nodes: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b := &leaseCandidate{id: "a"}, &leaseCandidate{id: "b"}
	campaign(ctx, t, c.Config, "watched", a)
	waitLeading(t, a, 10*time.Second)
	campaign(ctx, t, c.Config, "watched", b)
	time.Sleep(time.Second) // b has synced its watch and stands by
	getsBefore, listsBefore := b.gets.Load(), b.lists.Load()
	time.Sleep(3 * time.Second)
	if g, l := b.gets.Load()-getsBefore, b.lists.Load()-listsBefore; g != 0 || l != 0 {
		t.Errorf("the standby read the Lease %d times with GET and %d with LIST in 3 s standing by, want none: it should watch it", g, l)
	}
	if b.leading() {
		t.Fatal("the standby leads while the leader renews")
	}
	if a.gets.Load() != 0 {
		t.Errorf("the leader read the Lease %d times with GET, want none (it renews from its own last write)", a.gets.Load())
	}
	a.dead.Store(true)
	died := time.Now()
	last, err := c.Client.CoordinationV1().Leases("default").Get(ctx, "watched", metav1.GetOptions{})
	if err != nil || last.Spec.RenewTime == nil {
		t.Fatalf("reading the Lease: %v", err)
	}
	took := waitLeading(t, b, 10*time.Second)
	lease, err := c.Client.CoordinationV1().Leases("default").Get(ctx, "watched", metav1.GetOptions{})
	if err != nil || lease.Spec.AcquireTime == nil || *lease.Spec.HolderIdentity != "b" {
		t.Fatalf("the Lease after the handover: %v %+v", err, lease.Spec)
	}
	gap := lease.Spec.AcquireTime.Sub(last.Spec.RenewTime.Time)
	t.Logf("handover: a died → b leads %s; a's last renewal → b's acquisition %s (lease 2 s, retry 200 ms)", took.Sub(died), gap)
	if gap > 2*time.Second+2*200*time.Millisecond+time.Second {
		t.Errorf("the standby took over %s after the last renewal, more than the lease duration", gap)
	}
	if gap < 2*time.Second {
		t.Errorf("the standby took over %s after the last renewal, before the lease ran out", gap)
	}
	a.mu.Lock()
	aLost := a.lost
	a.mu.Unlock()
	if len(aLost) == 0 || !aLost[0].Before(took) {
		t.Errorf("the dead leader stopped leading at %v, the standby started at %v: both led", aLost, took)
	}
}

// TestTwoCandidatesNeverBothLead: two replicas campaign at once for a Lease
// that does not exist yet; one creates it and leads, the other stands by,
// and neither leads while the other does, through a release.
func TestTwoCandidatesNeverBothLead(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Nodes: 1})
	actx, stopA := context.WithCancel(context.Background())
	defer stopA()
	bctx, stopB := context.WithCancel(context.Background())
	defer stopB()
	a, b := &leaseCandidate{id: "a"}, &leaseCandidate{id: "b"}
	campaign(actx, t, c.Config, "raced", a)
	campaign(bctx, t, c.Config, "raced", b)
	both := func(d time.Duration) {
		t.Helper()
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			if a.leading() && b.leading() {
				t.Fatal("both candidates lead")
			}
		}
	}
	both(3 * time.Second)
	first, second, stopFirst := a, b, stopA
	if b.leading() {
		first, second, stopFirst = b, a, stopB
	}
	if !first.leading() {
		t.Fatal("neither candidate leads")
	}
	stopFirst() // releases the Lease
	if err := <-first.done; err != nil {
		t.Fatalf("%s: Run after cancel: %v", first.id, err)
	}
	waitLeading(t, second, 5*time.Second)
	both(2 * time.Second)
	lease, err := c.Client.CoordinationV1().Leases("default").Get(context.Background(), "raced", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != second.id || lease.Spec.LeaseTransitions == nil || *lease.Spec.LeaseTransitions != 1 {
		t.Fatalf("the Lease after the release: %v %+v", err, lease.Spec)
	}
}
