package orchestrator

import (
	"sync"

	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/nodewise/nodewise/orchestrator/drain"
	"github.com/nodewise/nodewise/orchestrator/gate"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/observe"
	"github.com/nodewise/nodewise/orchestrator/swap"
	"github.com/nodewise/nodewise/orchestrator/write"
)

// executor is the acting half, alive while this replica leads. It reads from
// informer caches, writes through the API and remembers only what it wrote
// (the Nodes its patches returned, the statuses), which a successor reads
// back from the API. A node's progress lives in its record (record.go).
type executor struct {
	o        *Orchestrator
	nodes    corelisters.NodeLister
	pods     observe.PodCache
	dss      appslisters.DaemonSetLister
	revs     appslisters.ControllerRevisionLister
	gate     gate.Gate
	recorder record.EventRecorder

	rolloutStore cache.Store
	kick         chan struct{}
	// freed is kicked when a node's worker ends (a slot is free): the next
	// pass runs at once, not paced as informer events are.
	freed chan struct{}
	wg    *sync.WaitGroup

	targets observe.Targets
	// waits are the waits on the caches for the DaemonSet controller.
	waits swap.Waits
	// swaps swap a target's pod on a node, by kind (surge or replace).
	swaps map[model.SwapKind]swap.Swapper
	// drainer drains a node (or chooses a swap in place under policy auto).
	drainer *drain.Drainer
	// claims are the nodes this process started or drives.
	claims observe.Claims

	// nodeWrites patches nodes and remembers what the API returned (Newest).
	nodeWrites *write.Nodes
	// changes wakes the steps that wait on the informer caches.
	changes observe.Changes
	// status queues and group-commits status writes.
	status *write.Status

	// cpMu guards cp, the last observation of the control plane (preflight's skew check).
	cpMu sync.Mutex
	cp   *controlPlane
	// cpCache serves the control plane from informers once synced (nil in tests).
	cpCache *controlPlaneCache
}

func (e *executor) poke() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// slotFreed wakes the reconcile loop for a pass without pacing.
func (e *executor) slotFreed() {
	select {
	case e.freed <- struct{}{}:
	default:
	}
}

// changed is every informer event handler: it wakes waiting steps and the
// reconcile loop.
func (e *executor) changed() {
	e.changes.Broadcast()
	e.poke()
}

// wire builds the rooms the executor acts through, over its caches, clients
// and recorder: the node writer, the swaps and the drainer.
func (e *executor) wire() {
	e.nodeWrites = &write.Nodes{Kube: e.o.kube, Cache: e.nodes, Changes: &e.changes, Now: e.o.cfg.Now, Log: e.o.log, Recorder: e.recorder}
	e.targets = observe.Targets{DaemonSets: e.dss, Revisions: e.revs, Pods: e.pods}
	e.waits = swap.Waits{Targets: e.targets, Changes: &e.changes, Now: e.o.cfg.Now}
	e.swaps = map[model.SwapKind]swap.Swapper{
		model.SwapReplace: swap.Replace{Waits: e.waits, Kube: e.o.kube, Log: e.o.log},
		model.SwapSurge:   swap.Surge{Waits: e.waits, Kube: e.o.kube, Log: e.o.log, DaemonSets: e.dss, Revisions: e.revs, Pods: e.pods},
	}
	e.drainer = &drain.Drainer{
		Kube: e.o.kube, Log: e.o.log, Now: e.o.cfg.Now, EvictRetryDelay: e.o.cfg.EvictRetryDelay, Namespace: e.o.cfg.Namespace,
		Agents: e.o.cfg.Agents, Targets: e.targets, Nodes: e.nodes, Recorder: e.recorder,
		Status: e.status, Records: e.nodeWrites, Leaving: e.leaving,
	}
}
