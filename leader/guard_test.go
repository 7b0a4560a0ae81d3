package leader

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// monotonic is a fake monotonic clock: it moves only when told, as the real
// one does while a process is stopped.
type monotonic struct{ t time.Time }

func (m *monotonic) now() time.Time        { return m.t }
func (m *monotonic) sleep(d time.Duration) { m.t = m.t.Add(d) }
func testGuard(hold time.Duration) (*Guard, *monotonic) {
	clock := &monotonic{t: time.Unix(1000, 0)}
	g := NewGuard(hold)
	g.now = clock.now
	return g, clock
}

// The guard holds from the renew request's send time for the renew
// deadline, and not a moment longer: a process stopped past it (the clock
// moved, nothing else happened: no renew failed, no context was cancelled)
// refuses its next write at once.
func TestGuardHoldsFromTheRenewRequestSent(t *testing.T) {
	g, clock := testGuard(10 * time.Second)
	if err := g.Check(); !errors.Is(err, ErrNotLeading) {
		t.Fatalf("before any acquire: %v, want ErrNotLeading", err)
	}
	sent := g.Now()
	clock.sleep(3 * time.Second) // the renew took 3 s to answer
	g.Renewed(sent)
	clock.sleep(6 * time.Second) // 9 s after the send
	if err := g.Check(); err != nil {
		t.Fatalf("9 s after the renew was sent: %v, want holding", err)
	}
	clock.sleep(time.Second) // SIGSTOP across the deadline: 10 s after the send
	err := g.Check()
	if !errors.Is(err, ErrNotLeading) || !strings.Contains(err.Error(), "10s ago") {
		t.Fatalf("10 s after the renew was sent: %v, want ErrNotLeading saying 10s ago", err)
	}
	g.Renewed(sent) // a late answer to an old request extends nothing
	if err := g.Check(); err == nil {
		t.Fatal("an old send time extended the fence")
	}
	g.Renewed(g.Now())
	if err := g.Check(); err != nil {
		t.Fatalf("after a new renew: %v", err)
	}
	g.Lost()
	if err := g.Check(); !errors.Is(err, ErrNotLeading) {
		t.Fatalf("after Lost: %v, want ErrNotLeading", err)
	}
	var none *Guard
	if err := none.Check(); err != nil {
		t.Fatalf("a nil guard refused: %v", err)
	}
}

// Every request but a read is checked as it leaves: a refused write never
// reaches the server, and its error wraps ErrNotLeading through client-go.
func TestGuardWrapFencesWritesNotReads(t *testing.T) {
	var writes, reads atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			reads.Add(1)
		} else {
			writes.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1"}}`))
	}))
	defer srv.Close()
	g, clock := testGuard(10 * time.Second)
	kube, err := kubernetes.NewForConfig(g.Wrap(&rest.Config{Host: srv.URL}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	patch := func() error {
		_, err := kube.CoreV1().Nodes().Patch(ctx, "n1", "application/merge-patch+json", []byte(`{}`), metav1.PatchOptions{})
		return err
	}
	g.Renewed(g.Now())
	if err := patch(); err != nil {
		t.Fatalf("patch while holding: %v", err)
	}
	clock.sleep(11 * time.Second)
	if _, err := kube.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{}); err != nil {
		t.Fatalf("a read was refused: %v", err)
	}
	err = patch()
	if !errors.Is(err, ErrNotLeading) {
		t.Fatalf("patch after the lease lapsed: %v, want ErrNotLeading", err)
	}
	if err := kube.CoreV1().Pods("a").Delete(ctx, "p", metav1.DeleteOptions{}); !errors.Is(err, ErrNotLeading) {
		t.Fatalf("delete after the lease lapsed: %v, want ErrNotLeading", err)
	}
	if w, r := writes.Load(), reads.Load(); w != 1 || r != 1 {
		t.Fatalf("server saw %d writes and %d reads, want 1 and 1", w, r)
	}
}

// The lock tells the guard when its write was sent, not when it returned;
// a write that leaves another holder ends the holding; and it never
// releases a Lease another replica holds (client-go's release decides from
// the record it last observed and retries a conflict over a fresh read).
func TestLockFencesTheGuardAndNeverReleasesAnothersLease(t *testing.T) {
	lease := func(holder string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "ns", ResourceVersion: "1"},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}
	}
	kube := fake.NewClientset(lease("a"))
	g, clock := testGuard(10 * time.Second)
	var updates int
	kube.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		updates++
		clock.sleep(4 * time.Second) // a slow API server
		return false, nil, nil
	})
	l := newWatchedLease(kube, "ns", "l", "a", "", zap.NewNop())
	l.guard = g
	ctx := context.Background()
	if _, _, err := l.Get(ctx); err != nil { // the informer is not running: read from the API
		t.Fatal(err)
	}
	renew := resourcelock.LeaderElectionRecord{HolderIdentity: "a", LeaseDurationSeconds: 15}
	if err := l.Update(ctx, renew); err != nil {
		t.Fatal(err)
	}
	clock.sleep(5 * time.Second) // 9 s after the send, 5 s after the answer
	if err := g.Check(); err != nil {
		t.Fatalf("9 s after the renew was sent: %v", err)
	}
	clock.sleep(time.Second)
	if err := g.Check(); err == nil {
		t.Fatal("the fence counted from the answer, not from the send")
	}

	// Releasing its own Lease ends the holding at once.
	g.Renewed(g.Now())
	if err := l.Update(ctx, resourcelock.LeaderElectionRecord{LeaseDurationSeconds: 1}); err != nil {
		t.Fatal(err)
	}
	if err := g.Check(); !errors.Is(err, ErrNotLeading) {
		t.Fatalf("after releasing: %v, want ErrNotLeading", err)
	}

	// Another replica took the Lease; a stale release must not clear it.
	taken := lease("b")
	if _, err := kube.CoordinationV1().Leases("ns").Update(ctx, taken, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Get(ctx); err != nil {
		t.Fatal(err)
	}
	before := updates
	err := l.Update(ctx, resourcelock.LeaderElectionRecord{LeaseDurationSeconds: 1})
	if err == nil || !strings.Contains(err.Error(), `"b" holds it`) {
		t.Fatalf("release over b's Lease: %v, want a refusal naming b", err)
	}
	if updates != before {
		t.Fatal("the refused release reached the API")
	}
	if got, _ := kube.CoordinationV1().Leases("ns").Get(ctx, "l", metav1.GetOptions{}); holder(got) != "b" {
		t.Fatalf("holder %q, want b", holder(got))
	}
}
