package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/locks"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// kuredLockValue is Kured's LockAnnotationValue (kubereboot/kured
// pkg/daemonsetlock), read here as Kured reads it.
type kuredLockValue struct {
	NodeID   string `json:"nodeID"`
	Metadata struct {
		Unschedulable bool     `json:"unschedulable"`
		Nodes         []string `json:"nodes"`
	} `json:"metadata"`
	Created time.Time     `json:"created"`
	TTL     time.Duration `json:"TTL"`
}

func (v kuredLockValue) expired() bool { return v.TTL > 0 && time.Since(v.Created) >= v.TTL }

// kured is a simulated Kured pod on node: its single lock's Acquire and
// Release, as kubereboot/kured pkg/daemonsetlock does them (a Get, then an
// Update with that resourceVersion; a conflict reads again).
type kured struct {
	client kubernetes.Interface
	node   string
}

func (k kured) acquire(ctx context.Context) (bool, string, error) {
	for {
		ds, err := k.client.AppsV1().DaemonSets("kube-system").Get(ctx, "kured", metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		if s, ok := ds.Annotations[locks.AnnotationKured]; ok {
			var v kuredLockValue
			if err := json.Unmarshal([]byte(s), &v); err != nil {
				return false, "", err
			}
			if !v.expired() {
				return v.NodeID == k.node, v.NodeID, nil
			}
		}
		if ds.Annotations == nil {
			ds.Annotations = map[string]string{}
		}
		b, _ := json.Marshal(kuredLockValue{NodeID: k.node, Created: time.Now().UTC()})
		ds.Annotations[locks.AnnotationKured] = string(b)
		if _, err := k.client.AppsV1().DaemonSets("kube-system").Update(ctx, ds, metav1.UpdateOptions{}); apierrors.IsConflict(err) {
			continue
		} else if err != nil {
			return false, "", err
		}
		return true, k.node, nil
	}
}

func (k kured) release(ctx context.Context) error {
	for {
		ds, err := k.client.AppsV1().DaemonSets("kube-system").Get(ctx, "kured", metav1.GetOptions{})
		if err != nil {
			return err
		}
		delete(ds.Annotations, locks.AnnotationKured)
		if _, err := k.client.AppsV1().DaemonSets("kube-system").Update(ctx, ds, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
			return err
		}
	}
}

// lock reads Kured's lock as it stands (present false: no annotation).
func (e *env) kuredLock() (kuredLockValue, bool) {
	e.t.Helper()
	ds, err := e.c.Client.AppsV1().DaemonSets("kube-system").Get(context.Background(), "kured", metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	s, ok := ds.Annotations[locks.AnnotationKured]
	var v kuredLockValue
	if ok {
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			e.t.Fatalf("Kured cannot read the lock %s: %v", s, err)
		}
	}
	return v, ok
}

// kuredTries runs Kured's Acquire on node every 100 ms until stop; a lock it
// gets while nodewise has a node cordoned or in flight is a violation (then
// it releases, as Kured does after its reboot).
type kuredTries struct {
	mu         sync.Mutex
	tries, won int
	violations []string
	stop       func()
}

func (e *env) kuredTrying(k kured, rollout string) *kuredTries {
	ctx, cancel := context.WithCancel(context.Background())
	r := &kuredTries{}
	done := make(chan struct{})
	r.stop = func() { cancel(); <-done }
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			got, _, err := k.acquire(ctx)
			if err == nil && got {
				busy := e.nodewiseBusy(ctx, rollout)
				_ = k.release(ctx)
				r.mu.Lock()
				r.won++
				if busy != "" {
					r.violations = append(r.violations, busy)
				}
				r.mu.Unlock()
			}
			r.mu.Lock()
			r.tries++
			r.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return r
}

// nodewiseBusy says what nodewise has out of service ("" when nothing): a
// cordoned node, or a node in flight in the rollout's status.
func (e *env) nodewiseBusy(ctx context.Context, rollout string) string {
	var busy []string
	if nodes, err := e.c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil {
		for _, n := range nodes.Items {
			if n.Spec.Unschedulable {
				busy = append(busy, n.Name+" cordoned")
			}
		}
	}
	if nr, err := e.rollouts.Get(ctx, rollout, metav1.GetOptions{}); err == nil {
		for _, ns := range nr.Status.Nodes {
			if model.InFlight(ns.State) {
				busy = append(busy, ns.Name+" "+string(ns.State))
			}
		}
	}
	return strings.Join(busy, ", ")
}

// TestNodewiseTakesKuredLock: Kured's DaemonSet exists without a lock (Kured
// never took one). While Kured holds its lock no node starts; once Kured
// released it, nodewise takes it before its first cordon, naming
// nodewise:<rollout> and the node in flight, and a Kured pod that tries to
// acquire it (Get, then Update with the resourceVersion, as Kured does)
// every 100 ms never gets it while a node is cordoned or in flight. The
// orchestrator renews the lock past its TTL while it lives; killed -9
// mid-soak, its lock lapses for Kured after the TTL; its successor takes it
// again for the node still in flight and releases it when the rollout
// completes.
func TestNodewiseTakesKuredLock(t *testing.T) {
	const nodes, ttl = 3, 3 * time.Second
	const name = "takes-kured-lock"
	e := newEnv(t, nodes, 1)
	ctx := context.Background()
	e.kuredDaemonSet("")
	k := kured{client: e.c.Client, node: e.c.Nodes[nodes-1].Name}
	w := e.watch()
	e.upgrade("1.28.1")

	// Kured reboots a node: nodewise waits for its lock, and writes nothing.
	if got, _, err := k.acquire(ctx); err != nil || !got {
		t.Fatalf("Kured acquiring its free lock: %v, %v", got, err)
	}
	first := e.startProcess("first-"+name, "127.0.0.1:0", "--kured-lock-ttl", ttl.String(), "--test-hold-after-persist", string(v1alpha1.NodeSoak))
	e.apply(rollout(name, func(s *v1alpha1.NodeRolloutSpec) {
		// Kured's node counts against maxUnavailable: with 2, one node could start.
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(2)
		s.Soak = &v1alpha1.Duration{Duration: time.Second}
	}))
	e.waitRollout(name, time.Minute, "a node waiting for Kured's lock", func(nr *v1alpha1.NodeRollout) bool {
		for _, ns := range nr.Status.Nodes {
			if strings.Contains(ns.Reason, "Kured's lock cannot be taken") && strings.Contains(ns.Reason, k.node) {
				return true
			}
		}
		return false
	})
	time.Sleep(2 * time.Second) // a broken orchestrator would start a node now
	if busy := e.nodewiseBusy(ctx, name); busy != "" {
		t.Fatalf("nodewise started while Kured held its lock: %s", busy)
	}
	if v, _ := e.kuredLock(); v.NodeID != k.node {
		t.Fatalf("Kured's lock names %q, want Kured's %s (nodewise overwrote it)", v.NodeID, k.node)
	}
	if err := k.release(ctx); err != nil {
		t.Fatal(err)
	}

	// nodewise takes the lock for its node in flight; Kured keeps trying.
	tries := e.kuredTrying(k, name)
	node := e.waitStep(name, v1alpha1.NodeSoak) // the first process holds here forever
	v, ok := e.kuredLock()
	if !ok || v.NodeID != locks.KuredHolder(name) || strings.Join(v.Metadata.Nodes, ",") != node || v.TTL != ttl {
		t.Fatalf("Kured's lock while %s soaks: %+v (present %v), want holder %s for [%s], TTL %s", node, v, ok, locks.KuredHolder(name), node, ttl)
	}
	w.mu.Lock()
	firstSwap := w.firstSwap[node]
	w.mu.Unlock()
	time.Sleep(2 * ttl) // past the TTL: a live orchestrator renews it
	renewed, _ := e.kuredLock()
	if renewed.NodeID != locks.KuredHolder(name) || renewed.expired() || !renewed.Created.After(v.Created) {
		t.Fatalf("after %s the lock is %+v, want nodewise's, renewed after %s", 2*ttl, renewed, v.Created)
	}
	tries.stop()

	// Killed -9 with the node in flight: the lock lapses for Kured after its TTL.
	first.kill()
	killed := time.Now()
	time.Sleep(ttl + time.Second)
	if stale, ok := e.kuredLock(); !ok || stale.NodeID != locks.KuredHolder(name) || !stale.expired() {
		t.Fatalf("%s after the kill the lock is %+v (present %v), want nodewise's, expired for Kured", time.Since(killed).Round(time.Millisecond), stale, ok)
	}

	// The successor resumes the node, holds the lock again, then releases it.
	// (Kured, had it tried before, could have taken the expired lock: the
	// TTL is what lets Kured go on when no orchestrator comes back.)
	e.startProcess("second-"+name, "127.0.0.1:0", "--kured-lock-ttl", ttl.String())
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		v, ok := e.kuredLock()
		return ok && v.NodeID == locks.KuredHolder(name) && !v.expired(), nil
	}); err != nil {
		v, _ := e.kuredLock()
		t.Fatalf("the successor does not hold Kured's lock for %s in flight: %+v", node, v)
	}
	tries2 := e.kuredTrying(k, name)
	nr := e.waitPhase(name, 3*time.Minute, v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted)
	if nr.Status.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("phase %s: %s", nr.Status.Phase, nr.Status.HaltReason)
	}
	tries2.stop()
	e.assertAllOnNewest(nodes)
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		v, ok := e.kuredLock()
		return !ok || v.NodeID == k.node, nil // released (or Kured took it since)
	}); err != nil {
		v, _ := e.kuredLock()
		t.Fatalf("Kured's lock after the rollout completed: %+v, want released", v)
	}
	if got, holder, err := k.acquire(ctx); err != nil || !got {
		t.Errorf("Kured acquiring after the rollout: %v (held by %s), %v", got, holder, err)
	}
	for _, r := range []*kuredTries{tries, tries2} {
		r.mu.Lock()
		t.Logf("Kured tried %d times, got the lock %d times (only while nodewise had nothing out)", r.tries, r.won)
		for _, b := range r.violations {
			t.Errorf("Kured got its lock while nodewise had out: %s", b)
		}
		if r.tries < 10 {
			t.Errorf("Kured tried only %d times: the test proves little", r.tries)
		}
		r.mu.Unlock()
	}
	// Events on the rollout say when the lock was taken and released (the
	// recorder sends them in the background).
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		events, err := e.c.Client.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=NodeRollout,involvedObject.name=" + name})
		if err != nil {
			return false, nil
		}
		seen := map[string]bool{}
		for _, ev := range events.Items {
			seen[ev.Reason] = true
		}
		return seen["KuredLockTaken"] && seen["KuredLockReleased"], nil
	}); err != nil {
		t.Errorf("no KuredLockTaken and KuredLockReleased Events on rollout %s", name)
	}
	if firstSwap.IsZero() {
		t.Errorf("no swap of %s seen", node)
	}
}
