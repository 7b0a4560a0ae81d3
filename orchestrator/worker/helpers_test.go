package worker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/gate"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/metrics"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/observe"
	"github.com/nodewise/nodewise/orchestrator/swap"
	"github.com/nodewise/nodewise/orchestrator/write"
)

func indexer() cache.Indexer {
	return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
}

// caches are the informer stores a test worker reads.
type caches struct{ nodes, pods, dss, revs cache.Indexer }

func newCaches() caches { return caches{indexer(), indexer(), indexer(), indexer()} }

// world is a World whose snapshot a test gives, recording the status it
// was asked with.
type world struct {
	mu       sync.Mutex
	snapshot func(nr *v1alpha1.NodeRollout) model.Snapshot
	asked    []v1alpha1.NodeRolloutStatus
	skew     error
}

func (w *world) Snapshot(nr *v1alpha1.NodeRollout, _ model.Policy) (model.Snapshot, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.asked = append(w.asked, *nr.Status.DeepCopy())
	if w.snapshot == nil {
		return model.Snapshot{Status: nr.Status}, nil
	}
	return w.snapshot(nr), nil
}

func (w *world) PreflightSkew(context.Context, model.Policy, string) error { return w.skew }

// testWorker is a Worker over c, judged by g, for nr: its status writer
// has read nr once from an in-memory API (as a leader's first write does),
// the rollout cache holds nr, and no request leaves the process.
func testWorker(t *testing.T, c caches, g gate.Gate, nr *v1alpha1.NodeRollout, now func() time.Time) *Worker {
	t.Helper()
	status := write.NewStatus(context.Background(), fixture.NewRollouts(nr), zap.NewNop())
	if err := status.Mutate(context.Background(), nr.Name, func(*v1alpha1.NodeRolloutStatus) {}); err != nil {
		t.Fatal(err)
	}
	m, err := metrics.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	_ = store.Add(nr.DeepCopy())
	pods := observe.PodCache{PodLister: corelisters.NewPodLister(c.pods)}
	nodes := corelisters.NewNodeLister(c.nodes)
	targets := observe.Targets{DaemonSets: appslisters.NewDaemonSetLister(c.dss), Revisions: appslisters.NewControllerRevisionLister(c.revs), Pods: pods}
	changes := &observe.Changes{}
	return &Worker{
		Log: zap.NewNop(), Metrics: m, Now: now, Gate: g, Recorder: record.NewFakeRecorder(100),
		Nodes: nodes, Pods: pods, DaemonSets: targets.DaemonSets, Targets: targets, Rollouts: store,
		Claims: &observe.Claims{}, NodeWrites: &write.Nodes{Cache: nodes, Changes: changes, Now: now, Log: zap.NewNop()},
		Status: status, Waits: swap.Waits{Targets: targets, Changes: changes, Now: now},
		World: &world{}, Freed: func() {}, WG: &sync.WaitGroup{},
	}
}
