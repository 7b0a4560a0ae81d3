// Package orchestrator is the NodeRollout controller: it observes nodes, pods
// and the target DaemonSets, plans the next steps with a pure function, and
// acts on them node by node (cordon, drain, swap, soak, gate), persisting every
// step in the API first so a successor resumes after a crash.
package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/nodewise/nodewise/orchestrator/apis/v1alpha1"
)

// ErrLostLeadership is returned by Run when this replica loses its Lease.
var ErrLostLeadership = errors.New("lost the leader lease")

// Orchestrator runs NodeRollouts while it holds the leader Lease.
type Orchestrator struct {
	cfg      Config
	log      *zap.Logger
	metrics  *Metrics
	kube     kubernetes.Interface
	rollouts RolloutClient
}

// New validates cfg, fills defaults and builds the clients (every request counted).
func New(cfg Config) (*Orchestrator, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("orchestrator config: %w", err)
	}
	m, err := NewMetrics(cfg.Registry)
	if err != nil {
		return nil, fmt.Errorf("registering metrics: %w", err)
	}
	rc := m.CountRequests(cfg.RESTConfig)
	if rc.QPS == 0 {
		rc.QPS, rc.Burst = 50, 100
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("building the Kubernetes client: %w", err)
	}
	ro, err := NewRolloutClient(rc)
	if err != nil {
		return nil, err
	}
	return &Orchestrator{cfg: cfg, log: cfg.Logger, metrics: m, kube: kube, rollouts: ro}, nil
}

// Run serves metrics, campaigns for the Lease and, while leading, reconciles
// every NodeRollout. It returns ErrLostLeadership if the Lease is lost, and nil
// when ctx ends.
func (o *Orchestrator) Run(ctx context.Context) error {
	if o.cfg.MetricsAddr != "" {
		srv, err := ServeMetrics(o.cfg.MetricsAddr, o.cfg.Registry, o.log)
		if err != nil {
			return err
		}
		defer srv.Close()
	}
	return RunWhileLeading(ctx, LeaderElection{
		Client: o.kube, Namespace: o.cfg.Namespace, Name: LeaseName, Identity: o.cfg.Identity,
		LeaseDuration: o.cfg.LeaseDuration, RenewDeadline: o.cfg.RenewDeadline, RetryPeriod: o.cfg.RetryPeriod,
		Log: o.log, Leading: func(leading bool) { o.metrics.IsLeader.Set(boolGauge(leading)) },
	}, o.lead)
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// lead runs while this replica holds the Lease: informers, then the reconcile loop.
func (o *Orchestrator) lead(ctx context.Context) error {
	f := informers.NewSharedInformerFactory(o.kube, 0)
	ex := &executor{
		o:        o,
		nodes:    f.Core().V1().Nodes().Lister(),
		pods:     f.Core().V1().Pods().Lister(),
		dss:      f.Apps().V1().DaemonSets().Lister(),
		revs:     f.Apps().V1().ControllerRevisions().Lister(),
		kick:     make(chan struct{}, 1),
		workers:  map[string]bool{},
		overlay:  map[string]nodeMark{},
		soaks:    map[string]time.Time{},
		verdicts: map[string]string{},
		written:  map[string]*corev1.Node{},
		status:   statusWriter{current: map[string]*v1alpha1.NodeRollout{}},
		rollouts: map[string]*v1alpha1.NodeRollout{},
	}
	if ex.gate = o.cfg.Gate; ex.gate == nil {
		ex.gate = ReadinessGate{Nodes: ex.nodes, Pods: ex.pods}
	}
	for _, inf := range []cache.SharedIndexInformer{f.Core().V1().Nodes().Informer(), f.Core().V1().Pods().Informer(), f.Apps().V1().DaemonSets().Informer(), f.Apps().V1().ControllerRevisions().Informer()} {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) { ex.changed() }, UpdateFunc: func(_, _ any) { ex.changed() }, DeleteFunc: func(any) { ex.changed() }}); err != nil {
			return fmt.Errorf("adding event handler: %w", err)
		}
	}
	rinf := newRolloutInformer(o.rollouts)
	if _, err := rinf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) { ex.poke() }, UpdateFunc: func(_, _ any) { ex.poke() }}); err != nil {
		return fmt.Errorf("adding event handler: %w", err)
	}
	ex.rolloutStore = rinf.GetStore()

	bc := record.NewBroadcaster(record.WithContext(ctx))
	bc.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: o.kube.CoreV1().Events("")})
	defer bc.Shutdown()
	ex.recorder = bc.NewRecorder(eventScheme(), corev1.EventSource{Component: FieldManager})

	f.Start(ctx.Done())
	go rinf.Run(ctx.Done())
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("syncing the %v cache", typ)
		}
	}
	if !cache.WaitForCacheSync(ctx.Done(), rinf.HasSynced) {
		return errors.New("syncing the NodeRollout cache")
	}
	o.log.Info("caches synced; reconciling")
	var wg sync.WaitGroup
	ex.wg = &wg
	defer wg.Wait()
	t := time.NewTicker(o.cfg.Resync)
	defer t.Stop()
	for {
		ex.reconcileAll(ctx)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		case <-ex.kick:
		}
	}
}

func eventScheme() *runtimeScheme {
	s := newRuntimeScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	return s
}
