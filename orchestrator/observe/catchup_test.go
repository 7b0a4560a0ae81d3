package observe

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

func TestCatchUpWaitsForTheCacheToHoldWhatTheAPIHolds(t *testing.T) {
	node := func(name, rv string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv}}
	}
	kube := fake.NewClientset(node("a", "7"), node("b", "9"))
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
	kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: "2"}})
	lister := corelisters.NewNodeLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := CatchUp(ctx, kube, lister); err == nil {
		t.Fatal("caught up with a cache that never held node a")
	}
}
