package orchestrator

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// executor is the acting half, alive while this replica leads. It reads from
// informer caches, writes through the API and remembers only what it wrote
// (the overlay), which a successor rebuilds from the API.
type executor struct {
	o        *Orchestrator
	nodes    corelisters.NodeLister
	pods     corelisters.PodLister
	dss      appslisters.DaemonSetLister
	revs     appslisters.ControllerRevisionLister
	gate     Gate
	recorder record.EventRecorder

	rolloutStore cache.Store
	kick         chan struct{}
	wg           *sync.WaitGroup

	mu sync.Mutex
	// workers holds "rollout/node" for every node a goroutine is driving.
	workers map[string]bool
	// overlay is the node step this process last persisted ("rollout/node"),
	// newer than the informer cache until the watch catches up.
	overlay map[string]nodeMark
	// soaks remembers when each node's soak and swap began ("rollout/node/key").
	soaks map[string]time.Time
	// verdicts holds a gate's summary until the next step persists it.
	verdicts map[string]string
	// carry holds what a node's next step persists with it besides the
	// verdict ("rollout/node"): the judge's summary, and that a drain
	// finished. Made on first use.
	carry map[string]carried
	// written is the Node object the API returned to this process's last
	// patch of it, by name: at least as new as anything this process wrote,
	// so a conditional patch based on it needs no GET (see readNode).
	written map[string]*corev1.Node
	// changes wakes the steps that wait on the informer caches (see changes.go).
	changes changes
	// status queues and group-commits status writes (see statuswriter.go).
	status statusWriter

	// cpMu guards cp, the last observation of the control plane (preflight's skew check).
	cpMu sync.Mutex
	cp   *controlPlane
	// cpCache serves the control plane from informers once synced (nil in tests).
	cpCache *controlPlaneCache
}

// claimed is the in-memory state of a node the planner started whose worker
// has not yet persisted Preflight. It is never written to the API.
const claimed v1alpha1.NodeState = "Claimed"

// carried is persisted with a node's next step (see persistStepWith).
type carried struct {
	judgement *v1alpha1.NodeJudgement // written with the verdict (nil clears an older one)
	drained   bool                    // write AnnotationDrainedAt
	halt      string                  // halt the rollout with this reason
}

// carryNext records what the node's next step persists with it.
func (e *executor) carryNext(rollout, node string, f func(*carried)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.carry == nil {
		e.carry = map[string]carried{}
	}
	c := e.carry[rollout+"/"+node]
	f(&c)
	e.carry[rollout+"/"+node] = c
}

type nodeMark struct {
	state v1alpha1.NodeState
	since time.Time
}

func (e *executor) poke() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

func (e *executor) mark(rollout, node string, st v1alpha1.NodeState, since time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.overlay[rollout+"/"+node] = nodeMark{state: st, since: since}
}

func (e *executor) marked(rollout, node string) (nodeMark, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	m, ok := e.overlay[rollout+"/"+node]
	return m, ok
}
