// Package orchestrator is the NodeRollout controller: it observes nodes, pods
// and the target DaemonSets, plans the next steps with a pure function, and
// acts on them node by node (cordon, drain, swap, soak, gate), persisting every
// step in the API first so a successor resumes after a crash.
package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/leader"
	"github.com/nodewise/nodewise/orchestrator/gate"
	"github.com/nodewise/nodewise/orchestrator/metrics"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/observe"
	"github.com/nodewise/nodewise/orchestrator/preflight"
	"github.com/nodewise/nodewise/orchestrator/silence"
	"github.com/nodewise/nodewise/orchestrator/write"
)

// Orchestrator runs NodeRollouts while it holds the leader Lease.
type Orchestrator struct {
	cfg     Config
	log     *zap.Logger
	metrics *metrics.Metrics
	// guard fences every write of kube and rollouts (leader.Guard): a
	// replica that does not know itself to hold the Lease now writes nothing.
	guard *leader.Guard
	kube  kubernetes.Interface
	// meta reads objects' metadata only (observe.CatchUp's node list).
	meta     metadata.Interface
	rollouts v1alpha1.NodeRolloutInterface
	// dyn reads Istio's AuthorizationPolicies for the precheck.
	dyn dynamic.Interface
	// leaseKube is the Lease's own client, the only one not fenced.
	leaseKube kubernetes.Interface
	// silences holds the nodes' Alertmanager silences (nil: none).
	silences *silence.Silencer
}

// New validates cfg, fills defaults and builds the clients (every request counted).
func New(cfg Config) (*Orchestrator, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("orchestrator config: %w", err)
	}
	m, err := metrics.NewMetrics(cfg.Registry)
	if err != nil {
		return nil, fmt.Errorf("registering metrics: %w", err)
	}
	rc := m.CountRequests(cfg.RESTConfig)
	if rc.QPS == 0 {
		rc.QPS, rc.Burst = 50, 100
	}
	// The identity in every request's User-Agent tells the replicas apart
	// in the API server's audit log.
	rc.UserAgent = fmt.Sprintf("%s %s/%s", rest.DefaultKubernetesUserAgent(), model.FieldManager, cfg.Identity)
	leaseKube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("building the Kubernetes client: %w", err)
	}
	guard := leader.NewGuard(cfg.RenewDeadline)
	fenced := guard.Wrap(rc)
	kube, err := kubernetes.NewForConfig(fenced)
	if err != nil {
		return nil, fmt.Errorf("building the Kubernetes client: %w", err)
	}
	nw, err := v1alpha1.NewForConfig(fenced)
	if err != nil {
		return nil, err
	}
	meta, err := metadata.NewForConfig(fenced)
	if err != nil {
		return nil, fmt.Errorf("building the metadata client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(fenced)
	if err != nil {
		return nil, fmt.Errorf("building the dynamic client: %w", err)
	}
	o := &Orchestrator{cfg: cfg, log: cfg.Logger, metrics: m, guard: guard, kube: kube, meta: meta, rollouts: nw.NodeRollouts(), leaseKube: leaseKube, dyn: dyn}
	if cfg.Alertmanager != nil {
		sc := *cfg.Alertmanager
		sc.Registry, sc.Logger, sc.Now = cfg.Registry, cfg.Logger.Named("silence"), cfg.Now
		if o.silences, err = silence.New(sc); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// Run serves metrics, campaigns for the Lease and, while leading, reconciles
// every NodeRollout. It returns leader.ErrLost if the Lease is lost, and nil
// when ctx ends.
func (o *Orchestrator) Run(ctx context.Context) error {
	var synced atomic.Bool
	if o.cfg.MetricsAddr != "" {
		cachesSynced := func(context.Context) error {
			if !synced.Load() {
				return errors.New("the caches have not synced (is the API server reachable, and does RBAC allow listing nodes, pods, DaemonSets, ControllerRevisions and NodeRollouts?)")
			}
			return nil
		}
		srv, err := leader.ServeMetrics(o.cfg.MetricsAddr, o.cfg.Identity, o.cfg.Registry, o.log, cachesSynced, leader.APIReachable(o.kube))
		if err != nil {
			return err
		}
		defer srv.Close()
	}
	// A replica campaigns only once its caches are synced: the leader acts
	// as soon as it holds the Lease (a handover is the lease time, not the
	// lease time plus listing every node and pod), and a replica that cannot
	// sync (RBAC) never holds the Lease from one that can. The caches only
	// read; only the leader acts.
	cctx, stop := context.WithCancel(ctx)
	defer stop()
	c := startCaches(cctx, o)
	if err := c.waitSynced(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	synced.Store(true)
	o.log.Info("caches synced; campaigning for the Lease")
	return leader.Run(ctx, leader.Election{
		Client: o.leaseKube, Namespace: o.cfg.Namespace, Name: model.LeaseName, Identity: o.cfg.Identity,
		LeaseDuration: o.cfg.LeaseDuration, RenewDeadline: o.cfg.RenewDeadline, RetryPeriod: o.cfg.RetryPeriod,
		Log: o.log, Guard: o.guard, Version: o.cfg.Version, Address: o.cfg.Address, Leading: func(leading bool) { o.metrics.IsLeader.Set(boolGauge(leading)) },
	}, func(lctx context.Context) error { return o.lead(lctx, c) })
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// caches are the informers the executor reads, started before campaigning.
type caches struct {
	f       informers.SharedInformerFactory
	rollout cache.SharedIndexInformer
	cp      *preflight.ControlPlaneCache
}

func startCaches(ctx context.Context, o *Orchestrator) *caches {
	c := &caches{f: informers.NewSharedInformerFactoryWithOptions(o.kube, 0, informers.WithTransform(observe.TrimCached)), rollout: observe.NewRolloutInformer(o.rollouts), cp: preflight.NewControlPlaneCache(o.kube, o.cfg.IstioNamespace)}
	c.watched() // registers them with the factory, which starts only those
	if err := observe.AddPodNodeIndex(c.f.Core().V1().Pods().Informer()); err != nil {
		panic(err) // only fails on an informer already started or a duplicate index name: a bug
	}
	c.f.Start(ctx.Done())
	go c.rollout.Run(ctx.Done())
	c.cp.Run(ctx.Done())
	return c
}

// waitSynced waits for the executor's caches (not the control-plane cache,
// see preflight.ControlPlaneCache).
func (c *caches) waitSynced(ctx context.Context) error {
	for typ, ok := range c.f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("syncing the %v cache", typ)
		}
	}
	if !cache.WaitForCacheSync(ctx.Done(), c.rollout.HasSynced) {
		return errors.New("syncing the NodeRollout cache")
	}
	return nil
}

// watcher is an informer whose events wake the executor, and what its
// events mark changed (views.go).
type watcher struct {
	inf  cache.SharedIndexInformer
	mark func(e *executor, old, obj any)
}

// watched are the informers the executor reads, each with its mark. Each
// is named once, with its mark: the factory's Informer() hands out a new
// wrapper at every call, so comparing informers never matches (a switch on
// them sent every event to "every node changed", and every pass was full).
func (c *caches) watched() []watcher {
	return []watcher{
		{c.f.Core().V1().Nodes().Informer(), (*executor).nodeEvent},
		{c.f.Core().V1().Pods().Informer(), (*executor).podEvent},
		{c.f.Apps().V1().DaemonSets().Informer(), (*executor).daemonSetEvent},
		{c.f.Apps().V1().ControllerRevisions().Informer(), func(e *executor, _, _ any) { e.dirty.All() }},
	}
}

// lead runs while this replica holds the Lease: wait for the caches, then
// the reconcile loop.
func (o *Orchestrator) lead(ctx context.Context, c *caches) error {
	f := c.f
	ex := &executor{
		cfg: o.cfg, log: o.log, metrics: o.metrics, kube: o.kube, rollouts: o.rollouts, dyn: o.dyn,
		nodes:    f.Core().V1().Nodes().Lister(),
		pods:     observe.NewPodCache(f.Core().V1().Pods().Informer().GetIndexer()),
		dss:      f.Apps().V1().DaemonSets().Lister(),
		revs:     f.Apps().V1().ControllerRevisions().Lister(),
		kick:     make(chan struct{}, 1),
		freed:    make(chan struct{}, 1),
		status:   write.NewStatus(ctx, o.rollouts, o.log),
		cpCache:  c.cp,
		fence:    o.guard.Check,
		silences: o.silences,
	}
	ex.status.Fence = o.guard.Check
	defer ex.status.Wait()
	if ex.gate = o.cfg.Gate; ex.gate == nil {
		ex.gate = gate.ReadinessGate{Nodes: ex.nodes, Pods: ex.pods}
	}
	// The recorder before the handlers: a DaemonSet's event may record one.
	bc := record.NewBroadcaster(record.WithContext(ctx))
	bc.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: o.kube.CoreV1().Events("")})
	defer bc.Shutdown()
	ex.recorder = bc.NewRecorder(eventScheme(), corev1.EventSource{Component: model.FieldManager})
	wake := func(inf cache.SharedIndexInformer, h cache.ResourceEventHandlerFuncs) error {
		reg, err := inf.AddEventHandler(h)
		if err != nil {
			return fmt.Errorf("adding event handler: %w", err)
		}
		go func() { <-ctx.Done(); _ = inf.RemoveEventHandler(reg) }()
		return nil
	}
	// Each event names what it changed (views.go): a node, the nodes of a
	// pod, or everything.
	for _, w := range c.watched() {
		mark := func(old, obj any) { w.mark(ex, old, obj) }
		if err := wake(w.inf, cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { mark(nil, obj); ex.changed() },
			UpdateFunc: func(old, obj any) { mark(old, obj); ex.changed() },
			DeleteFunc: func(obj any) { mark(nil, obj); ex.changed() },
		}); err != nil {
			return err
		}
	}
	rinf := c.rollout
	if err := wake(rinf, cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { ex.dirty.All(); ex.poke() },
		UpdateFunc: func(old, obj any) {
			if rolloutChanged(old, obj) {
				ex.dirty.All()
				ex.poke()
			}
		},
		DeleteFunc: func(any) { ex.dirty.All(); ex.poke() },
	}); err != nil {
		return err
	}
	ex.rolloutStore = rinf.GetStore()

	ex.wire()

	if err := c.waitSynced(ctx); err != nil { // synced before campaigning: returns at once
		return err
	}
	if rounds, err := observe.CatchUp(ctx, o.meta, ex.nodes); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		o.log.Warn("going on from the node cache", zap.Error(err))
	} else {
		o.log.Info("node cache caught up with the API", zap.Int("reads", rounds))
	}
	o.log.Info("caches synced; reconciling")
	defer ex.wg.Wait()
	t := time.NewTicker(o.cfg.Resync)
	defer t.Stop()
	// Every pass is full but the ones events and ended workers start
	// (views.go).
	full := true
	for {
		began := time.Now()
		if full {
			ex.reconcileAll(ctx)
		} else {
			ex.reconcileChanged(ctx)
		}
		took := time.Since(began)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ex.freed:
			full = false // a views pass plans with the worker's node (views.go)
			continue     // a slot is free: the next node starts now
		case <-t.C:
			full = true
		case <-ex.kick:
			full = false
		}
		// Every informer event kicks a pass; during a fleet rollout they
		// come faster than passes end. Events that come while a pass is
		// paced are folded into the next one (kick holds one); a slot freed
		// meanwhile ends the pause.
		pause := time.NewTimer(time.Until(began.Add(passPace(took))))
		select {
		case <-ctx.Done():
			pause.Stop()
			return ctx.Err()
		case <-ex.freed: // ends the pause; a resync's pass stays full
		case <-pause.C:
		}
		pause.Stop()
	}
}

// minPass is the least time between the starts of two reconcile passes.
const minPass = 50 * time.Millisecond

// passPace is the least time from one pass's start to the next: minPass,
// or five times what the pass took, so that passes over a big fleet take
// at most a fifth of a core however fast events come (a node's steps do
// not wait for passes: its worker reacts to the events itself).
func passPace(took time.Duration) time.Duration {
	return max(minPass, 5*took)
}

func eventScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	return s
}
