package orchestrator

import (
	"context"
	"sync"

	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/clusters"
	"github.com/nodewise/nodewise/orchestrator/drain"
	"github.com/nodewise/nodewise/orchestrator/fleet"
	"github.com/nodewise/nodewise/orchestrator/gate"
	"github.com/nodewise/nodewise/orchestrator/jobgate"
	"github.com/nodewise/nodewise/orchestrator/kuredlock"
	"github.com/nodewise/nodewise/orchestrator/metrics"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodecond"
	"github.com/nodewise/nodewise/orchestrator/observe"
	"github.com/nodewise/nodewise/orchestrator/preflight"
	"github.com/nodewise/nodewise/orchestrator/promotion"
	"github.com/nodewise/nodewise/orchestrator/silence"
	"github.com/nodewise/nodewise/orchestrator/swap"
	"github.com/nodewise/nodewise/orchestrator/upgradecheck"
	"github.com/nodewise/nodewise/orchestrator/worker"
	"github.com/nodewise/nodewise/orchestrator/write"
)

// executor is the reconcile loop's state, alive while this replica leads:
// the caches it reads, the writers it writes through, and the worker that
// drives each node it starts. It remembers only what it wrote (the Nodes
// its patches returned, the statuses), which a successor reads back from
// the API. A node's progress lives in its record (nodestep.Record).
type executor struct {
	cfg      Config
	log      *zap.Logger
	metrics  *metrics.Metrics
	kube     kubernetes.Interface
	dyn      dynamic.Interface // nil: the precheck reads no AuthorizationPolicy
	rollouts v1alpha1.NodeRolloutInterface
	nodes    corelisters.NodeLister
	pods     observe.PodCache
	dss      appslisters.DaemonSetLister
	revs     appslisters.ControllerRevisionLister
	targets  observe.Targets
	gate     gate.Gate
	recorder record.EventRecorder
	silences *silence.Silencer // nil: none

	rolloutStore cache.Store
	kick         chan struct{}
	// freed is kicked when a node's worker ends (a slot is free): the next
	// pass runs at once, not paced as informer events are.
	freed chan struct{}
	wg    sync.WaitGroup // the node workers

	// claims are the nodes this process started or drives; kuredClock is
	// the API server's clock, Kured's lock is written and read by.
	claims     observe.Claims
	kuredClock observe.ServerClock
	// changes wakes the steps that wait on the informer caches.
	changes observe.Changes
	// dirty is what informer events changed since the last pass took it;
	// views are, per rollout, what its last full pass planned from
	// (views.go). Only the reconcile loop reads views.
	dirty observe.Dirty
	views map[string]*fleet.View
	// nodeWrites patches nodes and remembers what the API returned (Newest).
	nodeWrites *write.Nodes
	// conditions writes the lifecycle conditions of the nodes nodewise has out.
	conditions *nodecond.Writer
	// status queues and group-commits status writes.
	status *write.Status
	// worker drives the nodes the planner starts.
	worker *worker.Worker
	// observer observes and decides each pass, writing nothing; apply
	// carries the pass out.
	observer *fleet.Observer
	apply    *applier

	// cpCache serves preflight's skew check the control plane from informers once synced (nil: it lists).
	cpCache *preflight.ControlPlaneCache
	// skew is preflight's version-skew check.
	skew *preflight.Skew
	// fence is nil while this replica holds the Lease (leader.Guard.Check;
	// nil: always, in unit tests).
	fence func() error
}

func (e *executor) poke() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// slotFreed marks the node of a worker that ended (its slot is free) and
// wakes the reconcile loop for a pass without pacing.
func (e *executor) slotFreed(node string) {
	e.dirty.Ended(node)
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

// wire builds the rooms the executor acts through over its caches, clients
// and recorder: the node writer, the swaps, the drainer and the worker.
func (e *executor) wire() {

	e.targets = observe.Targets{DaemonSets: e.dss, Revisions: e.revs, Pods: e.pods}
	e.skew = &preflight.Skew{Kube: e.kube, DaemonSets: e.dss, Policy: e.cfg.SkewPolicy, IstioNamespace: e.cfg.IstioNamespace, Now: e.cfg.Now, Cache: e.cpCache}
	e.nodeWrites = &write.Nodes{Kube: e.kube, Cache: e.nodes, Changes: &e.changes, Now: e.cfg.Now, Log: e.log, Recorder: e.recorder}
	waits := swap.Waits{Targets: e.targets, Changes: &e.changes, Now: e.cfg.Now, Recreate: &swap.Recreate{Kube: e.kube, Recorder: e.recorder, Log: e.log, Now: e.cfg.Now}}
	e.observer = &fleet.Observer{
		Nodes: e.nodes, Pods: e.pods, DaemonSets: e.dss, Targets: e.targets, Rollouts: e.rolloutStore, Claims: &e.claims,
		Written: e.nodeWrites, KuredClock: &e.kuredClock, Now: e.cfg.Now, IstioNamespace: e.cfg.IstioNamespace, ZtunnelSwap: e.cfg.ZtunnelSwap,
		Live: func(ctx context.Context, ns, name string) (*appsv1.DaemonSet, error) {
			return e.kube.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
		},
		Alerts:    e.gate.FiringAlerts,
		Promotion: (&promotion.Reader{Upstreams: clusters.Upstreams{Kube: e.kube, Namespace: e.cfg.Namespace, Now: e.cfg.Now}}).Hold,
		Precheck:  (&upgradecheck.Reader{Kube: e.kube, Dynamic: e.dyn, IstioNamespace: e.cfg.IstioNamespace, Now: e.cfg.Now}).Hold,
	}
	e.conditions = &nodecond.Writer{Kube: e.kube, Nodes: e.nodeWrites, Live: e.observer.RolloutLives, Now: e.cfg.Now, Log: e.log, WG: &e.wg}
	w := &worker.Worker{
		Log: e.log, Metrics: e.metrics, Now: e.cfg.Now, HoldAfterPersist: e.cfg.HoldAfterPersist,
		Gate: e.gate, Recorder: e.recorder, Nodes: e.nodes, Pods: e.pods, DaemonSets: e.dss, Targets: e.targets,
		Rollouts: e.rolloutStore, Claims: &e.claims, NodeWrites: e.nodeWrites, Status: e.status, Waits: waits,
		Swaps: map[model.SwapKind]swap.Swapper{
			model.SwapReplace: swap.Replace{Waits: waits, Kube: e.kube, Log: e.log},
			model.SwapSurge:   swap.Surge{Waits: waits, Kube: e.kube, Log: e.log, DaemonSets: e.dss, Revisions: e.revs, Pods: e.pods},
		},
		Skew: e.skew, Fleet: e.observer, Prechecks: &worker.Prechecks{}, Freed: e.slotFreed, WG: &e.wg, Fence: e.fence,
		Conditions: e.conditions,
	}
	if c, ok := e.cfg.Agents.(worker.CNIChecker); ok && e.gate.Reads().Samples {
		w.CNI = c // the agents that answer the judge answer for istio-cni
	}
	w.Drainer = &drain.Drainer{
		Kube: e.kube, Log: e.log, Now: e.cfg.Now, EvictRetryDelay: e.cfg.EvictRetryDelay, Namespace: e.cfg.Namespace,
		Agents: e.cfg.Agents, Targets: e.targets, Nodes: e.nodes, Recorder: e.recorder,
		Status: e.status, Records: e.nodeWrites, Leaving: w.Leaving, Conditions: e.conditions,
	}
	if e.silences != nil {
		w.Silences = e.silences.WithRecorder(e.recorder)
	}
	e.worker = w
	e.apply = &applier{
		log: e.log, metrics: e.metrics, recorder: e.recorder, rollouts: e.rollouts, status: e.status, worker: w, claims: &e.claims,
		gate: e.gate, kube: e.kube, targets: e.targets, now: e.cfg.Now,
		jobs: jobgate.Gate{Kube: e.kube, Mutate: e.status.Mutate, Now: e.cfg.Now, Log: e.log},
		kured: &kuredlock.Writer{
			Kube: e.kube, DaemonSets: e.dss, Namespace: e.cfg.KuredNamespace, DaemonSet: e.cfg.KuredDaemonSet,
			TTL: e.cfg.KuredLockTTL, Now: e.cfg.Now, Clock: &e.kuredClock, Log: e.log,
		},
	}
}

// precheck runs the skew check of the nodes next in line, each in the
// background (one at a time per node: worker.Precheck), while the nodes
// before them hold the slots. It writes nothing, and runs only once the
// control plane's informers have synced: the look-ahead adds no request.
func (e *executor) precheck(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, next []string) {
	if len(next) == 0 || e.cpCache == nil || !e.cpCache.Synced() {
		return
	}
	view := *nr // the pass goes on with nr; the checks read its name, UID and generation
	for _, node := range next {
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.worker.Precheck(ctx, &view, p, node)
		}()
	}
}
