package leader

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// A holder is gone only when its presence stream ends and its address then
// refuses connections: a stream cut while the process still answers, or an
// address answering as another replica, proves nothing.
func TestHolderGoneOnlyWhenItsAddressRefuses(t *testing.T) {
	var streams atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		streams.Add(1)
		presence("a")(w, r)
	}))
	other := httptest.NewServer(presence("c"))
	defer other.Close()
	gone := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := newHolderWatch(ctx, "b", zaptest.NewLogger(t), func() { gone <- struct{}{} })
	addr := strings.TrimPrefix(srv.URL, "http://")
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("no %s in 10s", what)
			}
		}
	}

	h.follow("b", addr) // its own Lease: nothing to follow
	h.follow("a", addr)
	waitFor("presence stream", func() bool { return streams.Load() == 1 })
	srv.CloseClientConnections() // the stream cut, the process alive
	waitFor("second presence stream", func() bool { return streams.Load() == 2 })
	if h.isGone("a") {
		t.Fatal("a cut stream made the holder gone while its address answers")
	}

	h.follow("a", strings.TrimPrefix(other.URL, "http://")) // answers as c
	select {
	case <-gone:
		t.Fatal("an address answering as another replica made the holder gone")
	case <-time.After(500 * time.Millisecond):
	}

	h.follow("a", addr)
	waitFor("third presence stream", func() bool { return streams.Load() == 3 })
	// The process exits: its port refuses, its connections close.
	srv.Listener.Close()
	srv.CloseClientConnections()
	defer srv.Close()
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the holder's address refuses connections and it was not found gone")
	}
	if !h.isGone("a") || h.isGone("b") || h.isGone("") {
		t.Fatalf("gone: a %t, b %t, none %t; want only a", h.isGone("a"), h.isGone("b"), h.isGone(""))
	}
	h.follow("c", "") // another holder since
	if h.isGone("a") {
		t.Fatal("the mark outlived its holder")
	}
}

// A standby takes the Lease over as soon as the leader's process is gone,
// with the default timings (15 s Lease, 2 s retry period), rather than a
// lease duration after the last renewal: the leader's presence server
// closed (what its process's exit does) and its Lease writes failing.
func TestStandbyTakesOverFromAGoneLeader(t *testing.T) {
	kube := fake.NewClientset()
	var aDead atomic.Bool
	kube.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		l := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if aDead.Load() && holder(l) == "a" {
			return true, nil, errors.New("a is gone")
		}
		return false, nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	var running sync.WaitGroup
	t.Cleanup(func() { cancel(); running.Wait() }) // the replicas log through t until they end
	replica := func(id string) (srvClose func(), leading <-chan bool) {
		srv, err := ServeMetrics("127.0.0.1:0", id, prometheus.NewRegistry(), zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
		ch := make(chan bool, 4)
		running.Add(1)
		go func() {
			defer running.Done()
			_ = Run(ctx, Election{
				Client: kube, Namespace: "ns", Name: "l", Identity: id, Address: srv.Addr,
				LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
				Log: zaptest.NewLogger(t).Named(id), Leading: func(b bool) { ch <- b },
			}, func(ctx context.Context) error { <-ctx.Done(); return nil })
		}()
		return func() { srv.Close() }, ch
	}
	closeA, aLeading := replica("a")
	if !<-aLeading {
		t.Fatal("a did not lead")
	}
	lease, err := kube.CoordinationV1().Leases("ns").Get(ctx, "l", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Annotations[AddressAnnotation] == "" {
		t.Fatalf("the leader wrote no %s: %v", AddressAnnotation, lease.Annotations)
	}
	_, bLeading := replica("b")
	time.Sleep(time.Second) // b stands by, following a's presence
	aDead.Store(true)
	closeA()
	killed := time.Now()
	select {
	case b := <-bLeading:
		if !b {
			t.Fatal("b stopped leading before it led")
		}
		t.Logf("b leads %s after a's process was gone (Lease 15s, retry period 2s)", time.Since(killed).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("b did not take over within 10s of a's process being gone: it waits for the 15s Lease to expire")
	}
	lease, err = kube.CoordinationV1().Leases("ns").Get(ctx, "l", metav1.GetOptions{})
	if err != nil || holder(lease) != "b" {
		t.Fatalf("the Lease: %v %v, want held by b", holder(lease), err)
	}
}
