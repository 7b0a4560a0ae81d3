package observe

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
)

func TestCatchUpWaitsForTheCacheToHoldWhatTheAPIHolds(t *testing.T) {
	node := func(name, rv string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv}}
	}
	kube := fixture.NodeMetadata(node("a", "7"), node("b", "9"))
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	_ = idx.Add(node("a", "7"))
	_ = idx.Add(node("b", "8")) // the previous leader's last write to b is not in the cache yet
	lister := corelisters.NewNodeLister(idx)

	done := make(chan error, 1)
	var rounds int
	go func() {
		var err error
		rounds, err = CatchUp(context.Background(), kube, lister)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("returned before the cache held b at 9: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	_ = idx.Update(node("b", "9")) // the watch delivers it
	if err := <-done; err != nil {
		t.Fatalf("catchUp: %v", err)
	}
	if rounds < 2 {
		t.Errorf("rounds %d, want a read before and after the cache caught up", rounds)
	}
}

func TestCatchUpGivesUpWhenTheLeaderStops(t *testing.T) {
	kube := fixture.NodeMetadata(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: "2"}})
	lister := corelisters.NewNodeLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := CatchUp(ctx, kube, lister); err == nil {
		t.Fatal("caught up with a cache that never held node a")
	}
}

// TestCatchUpRetriesFailedReads: a failed list of the API (here a 500, then
// a Forbidden) or of the cache is read again, not taken as caught up nor as
// the end; CatchUp returns once a read succeeds and matches.
func TestCatchUpRetriesFailedReads(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: "3"}}
	kube := fixture.NodeMetadata(n)
	fails := []error{
		apierrors.NewInternalError(errors.New("etcd leader changed")),
		apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New("RBAC not yet bound")),
	}
	kube.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if len(fails) == 0 {
			return false, nil, nil
		}
		err := fails[0]
		fails = fails[1:]
		return true, nil, err
	})
	cached := &flakyNodes{NodeLister: corelisters.NewNodeLister(newIndexer(n)), fails: 1}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	rounds, err := CatchUp(ctx, kube, cached)
	if err != nil {
		t.Fatalf("CatchUp: %v", err)
	}
	// Two failed API lists, one failed cache list, then the match.
	if rounds != 4 {
		t.Errorf("rounds %d, want 4", rounds)
	}
	lists := 0
	for _, a := range kube.Actions() {
		if a.Matches("list", "nodes") {
			lists++
		}
	}
	if lists != 4 {
		t.Errorf("%d node lists, want one per round (4)", lists)
	}
}

// TestCatchUpReportsAReadThatNeverSucceeds: a cache that cannot be read
// ends with ctx, the error naming the reads made and wrapping ctx's end.
func TestCatchUpReportsAReadThatNeverSucceeds(t *testing.T) {
	kube := fixture.NodeMetadata()
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	rounds, err := CatchUp(ctx, kube, fixture.FailingNodes{Err: errors.New("cache closed")})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("CatchUp on an unreadable cache = %v; want the deadline", err)
	}
	if rounds < 1 || !strings.Contains(err.Error(), fmt.Sprintf("after %d reads", rounds)) {
		t.Errorf("rounds %d, error %q; want the rounds named", rounds, err)
	}
}

// flakyNodes fails its first fails lists.
type flakyNodes struct {
	corelisters.NodeLister
	fails int
}

func (f *flakyNodes) List(s labels.Selector) ([]*corev1.Node, error) {
	if f.fails > 0 {
		f.fails--
		return nil, errors.New("cache not ready")
	}
	return f.NodeLister.List(s)
}

// TestCatchUpNamesTheRefusal: when RBAC refuses every node list, the error at
// the timeout carries the Forbidden (a person reads why, not only that time
// ran out).
func TestCatchUpNamesTheRefusal(t *testing.T) {
	kube := fixture.NodeMetadata()
	kube.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New("RBAC"))
	})
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := CatchUp(ctx, kube, corelisters.NewNodeLister(newIndexer()))
	if !apierrors.IsForbidden(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("CatchUp with node lists refused = %v; want the Forbidden and the deadline", err)
	}
}
