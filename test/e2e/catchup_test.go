package e2e

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"

	"github.com/nodewise/nodewise/orchestrator/observe"
	"github.com/nodewise/nodewise/sim/cluster"
)

// TestCatchUpOnTheAPIServer: a new leader's catch-up reads the nodes'
// metadata from the real API server. A node cache the watch keeps is caught
// up; a copy of it taken before a node write is not.
func TestCatchUpOnTheAPIServer(t *testing.T) {
	t.Parallel()
	c := cluster.Start(t, cluster.Options{Nodes: 2})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	md, err := metadata.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	f := informers.NewSharedInformerFactory(c.Client, 0)
	watched := f.Core().V1().Nodes()
	inf := watched.Informer()
	f.Start(ctx.Done())
	defer func() { cancel(); f.Shutdown() }() // Shutdown waits for the informers, which stop with ctx
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("the node cache did not sync")
	}
	rounds, err := observe.CatchUp(ctx, md, watched.Lister())
	if err != nil {
		t.Fatalf("a watched node cache is not caught up: %v", err)
	}
	t.Logf("caught up in %d reads", rounds)

	copied := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, o := range inf.GetStore().List() {
		_ = copied.Add(o)
	}
	written, err := c.Client.CoreV1().Nodes().Patch(ctx, "node-001", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"example.com/catch-up":"1"}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	short, stop := context.WithTimeout(ctx, time.Second)
	defer stop()
	if _, err := observe.CatchUp(short, md, corelisters.NewNodeLister(copied)); err == nil {
		t.Fatalf("caught up with a cache that misses the write of %s at %s", written.Name, written.ResourceVersion)
	}
	if _, err := observe.CatchUp(ctx, md, watched.Lister()); err != nil {
		t.Fatalf("the watched cache after the write: %v", err)
	}
}
