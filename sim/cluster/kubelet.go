package cluster

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// KubeletConfig configures the simulated kubelet of every simulated node.
type KubeletConfig struct {
	Nodes []NodeSpec
	// ReadyDelay is how long a bound pod takes to be Running and Ready.
	ReadyDelay time.Duration
	// Heartbeat is how often each node's lease is renewed; zero means 10 s.
	Heartbeat time.Duration
	// Runtime runs containers; nil runs none.
	Runtime Runtime
	Log     *zap.Logger
}

// Kubelet simulates the kubelets of the simulated nodes. It keeps Node
// objects and their leases alive, and moves pods bound to those nodes through
// their lifecycle: Pending → Running/Ready with a pod IP, container statuses
// and images; Terminating → gone after the containers exit or the grace period
// ends. Everything it knows it re-reads from the API, so a restarted Kubelet
// carries on where the last one stopped.
type Kubelet struct {
	cfg    KubeletConfig
	client kubernetes.Interface
	log    *zap.Logger
	nodes  map[string]*NodeSpec

	queue workqueue.TypedRateLimitingInterface[string]
	pods  cache.Indexer

	mu       sync.Mutex
	ips      ipam
	stopping map[types.UID]bool
	started  map[types.UID]*corev1.Pod        // pods whose containers the runtime started
	leases   map[string]*coordinationv1.Lease // node → the lease last written
}

// NewKubelet validates cfg and fills its defaults.
func NewKubelet(client kubernetes.Interface, cfg KubeletConfig) (*Kubelet, error) {
	if len(cfg.Nodes) == 0 {
		return nil, fmt.Errorf("kubelet: no nodes to simulate")
	}
	if cfg.ReadyDelay < 0 || cfg.Heartbeat < 0 {
		return nil, fmt.Errorf("kubelet: ReadyDelay and Heartbeat must not be negative")
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = kubeletHeartbeat
	}
	if cfg.Runtime == nil {
		cfg.Runtime = nullRuntime{}
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	k := &Kubelet{
		cfg: cfg, client: client, log: cfg.Log,
		nodes:    map[string]*NodeSpec{},
		queue:    workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		ips:      ipam{},
		stopping: map[types.UID]bool{},
		started:  map[types.UID]*corev1.Pod{},
		leases:   map[string]*coordinationv1.Lease{},
	}
	for i := range cfg.Nodes {
		k.nodes[cfg.Nodes[i].Name] = &cfg.Nodes[i]
	}
	return k, nil
}

// Run registers the nodes, then runs until ctx ends.
func (k *Kubelet) Run(ctx context.Context) error {
	if err := k.registerNodes(ctx); err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactoryWithOptions(k.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermNotEqualSelector("spec.nodeName", "").String()
		}))
	podInformer := factory.Core().V1().Pods().Informer()
	k.pods = podInformer.GetIndexer()
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			k.queue.Add(key)
		}
	}
	if _, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: func(obj any) { k.forget(ctx, obj); enqueue(obj) },
	}); err != nil {
		return err
	}
	nodeFactory := informers.NewSharedInformerFactory(k.client, 0)
	nodeInformer := nodeFactory.Core().V1().Nodes().Informer()
	if _, err := nodeInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { k.reconcileNodeReady(ctx, obj.(*corev1.Node)) },
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	nodeFactory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), podInformer.HasSynced, nodeInformer.HasSynced) {
		return ctx.Err()
	}
	k.adoptRunningPods()
	defer k.queue.ShutDown()
	for i := 0; i < 8; i++ {
		go wait.UntilWithContext(ctx, k.worker, time.Second)
	}
	go k.heartbeat(ctx)
	<-ctx.Done()
	return nil
}

// adoptRunningPods rebuilds the IP allocations of pods a previous kubelet
// started, so a restarted kubelet never hands out an IP twice.
func (k *Kubelet) adoptRunningPods() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, obj := range k.pods.List() {
		pod := obj.(*corev1.Pod)
		if _, ours := k.nodes[pod.Spec.NodeName]; ours && pod.Status.PodIP != "" && !pod.Spec.HostNetwork {
			k.ips.claim(k.nodes[pod.Spec.NodeName], pod.UID, pod.Status.PodIP)
			k.started[pod.UID] = pod
		}
	}
}

func (k *Kubelet) worker(ctx context.Context) {
	for {
		key, quit := k.queue.Get()
		if quit {
			return
		}
		requeue, err := k.sync(ctx, key)
		switch {
		case err != nil:
			k.log.Debug("pod sync failed; retrying", zap.String("pod", key), zap.Error(err))
			k.queue.AddRateLimited(key)
		case requeue > 0:
			k.queue.Forget(key)
			k.queue.AddAfter(key, requeue)
		default:
			k.queue.Forget(key)
		}
		k.queue.Done(key)
	}
}

// sync moves one pod one step; it returns a delay after which to look again.
func (k *Kubelet) sync(ctx context.Context, key string) (time.Duration, error) {
	obj, exists, err := k.pods.GetByKey(key)
	if err != nil || !exists {
		return 0, err
	}
	pod := obj.(*corev1.Pod)
	node, ours := k.nodes[pod.Spec.NodeName]
	if !ours {
		return 0, nil
	}
	if pod.DeletionTimestamp != nil {
		k.beginStop(ctx, pod)
		return 0, nil
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return 0, nil
	}
	k.mu.Lock()
	_, running := k.started[pod.UID]
	k.mu.Unlock()
	if !running {
		if wait := startDelay(pod, k.cfg.ReadyDelay) - time.Since(pod.CreationTimestamp.Time); wait > 0 {
			return wait, nil
		}
		return k.start(ctx, node, pod)
	}
	if hasTag(pod, TagCrashLoop) {
		return k.crashLoop(ctx, pod)
	}
	return 0, nil
}

// start asks the runtime to start the pod, then reports it Running.
func (k *Kubelet) start(ctx context.Context, node *NodeSpec, pod *corev1.Pod) (time.Duration, error) {
	if hasTag(pod, TagNoPull) {
		if err := k.updateStatus(ctx, pod, pullFailed(pod)); err != nil {
			return 0, err
		}
		return 5 * time.Second, nil // a kubelet retries with a back-off
	}
	ip := node.IP // a host-network pod has its node's address
	if !pod.Spec.HostNetwork {
		var err error
		k.mu.Lock()
		ip, err = k.ips.allocate(node, pod.UID)
		k.mu.Unlock()
		if err != nil {
			return 0, err
		}
	}
	if err := k.cfg.Runtime.Start(ctx, pod, ip); err != nil {
		k.log.Debug("runtime not ready to start pod", zap.String("pod", pod.Namespace+"/"+pod.Name), zap.Error(err))
		if err := k.updateStatus(ctx, pod, containerCreating(pod, err)); err != nil {
			return 0, err
		}
		return time.Second, nil
	}
	k.mu.Lock()
	k.started[pod.UID] = pod
	k.mu.Unlock()
	status := runningStatus(pod, node, ip, time.Now())
	if err := k.updateStatus(ctx, pod, status); err != nil {
		return 0, err
	}
	k.log.Debug("pod running", zap.String("pod", pod.Namespace+"/"+pod.Name), zap.String("node", node.Name), zap.String("ip", ip))
	if hasTag(pod, TagCrashLoop) {
		return crashBackoff(0), nil
	}
	return 0, nil
}

// crashLoop records one more restart of a crash-looping container.
func (k *Kubelet) crashLoop(ctx context.Context, pod *corev1.Pod) (time.Duration, error) {
	status := pod.Status.DeepCopy()
	restarts := int32(0)
	for i := range status.ContainerStatuses {
		cs := &status.ContainerStatuses[i]
		if !strings.HasSuffix(imageTag(cs.Image), TagCrashLoop) {
			continue
		}
		cs.RestartCount++
		restarts = cs.RestartCount
		now := metav1.Now()
		cs.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 1, Reason: "Error", StartedAt: now, FinishedAt: now}}
		cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
			Reason: "CrashLoopBackOff", Message: "simulated crash loop (image tag ends in " + TagCrashLoop + ")"}}
		cs.Ready = false
	}
	if err := k.updateStatus(ctx, pod, status); err != nil {
		return 0, err
	}
	return crashBackoff(restarts), nil
}

// crashBackoff doubles from 1 s up to 16 s, a faster version of the kubelet's
// 10 s to 5 min back-off, so tests see restarts without waiting minutes.
func crashBackoff(restarts int32) time.Duration {
	d := time.Second << min(restarts, 4)
	return d
}

// beginStop stops the pod's containers once, then deletes the pod for good.
func (k *Kubelet) beginStop(ctx context.Context, pod *corev1.Pod) {
	k.mu.Lock()
	if k.stopping[pod.UID] {
		k.mu.Unlock()
		return
	}
	k.stopping[pod.UID] = true
	k.mu.Unlock()
	go func() {
		grace := time.Duration(0)
		if pod.DeletionGracePeriodSeconds != nil {
			grace = time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
		}
		stopCtx, cancel := context.WithTimeout(ctx, grace)
		k.cfg.Runtime.Stop(stopCtx, pod)
		cancel()
		zero := int64(0)
		err := k.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: &zero,
			Preconditions:      &metav1.Preconditions{UID: &pod.UID},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			k.log.Warn("deleting terminated pod", zap.String("pod", pod.Namespace+"/"+pod.Name), zap.Error(err))
			k.mu.Lock()
			delete(k.stopping, pod.UID) // let the next sync try again
			k.mu.Unlock()
			k.queue.AddAfter(pod.Namespace+"/"+pod.Name, time.Second)
		}
	}()
}

// forget releases what a deleted pod held. A pod deleted with no grace period
// (force) still has its containers stopped.
func (k *Kubelet) forget(ctx context.Context, obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	k.mu.Lock()
	_, wasStarted := k.started[pod.UID]
	stopping := k.stopping[pod.UID]
	delete(k.started, pod.UID)
	delete(k.stopping, pod.UID)
	if node, ours := k.nodes[pod.Spec.NodeName]; ours {
		k.ips.release(node, pod.UID)
	}
	k.mu.Unlock()
	if wasStarted && !stopping {
		killed, cancel := context.WithCancel(ctx)
		cancel()
		k.cfg.Runtime.Stop(killed, pod)
	}
}

func (k *Kubelet) updateStatus(ctx context.Context, pod *corev1.Pod, status *corev1.PodStatus) error {
	p := pod.DeepCopy()
	p.Status = *status
	_, err := k.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func hasTag(pod *corev1.Pod, suffix string) bool {
	for _, c := range pod.Spec.Containers {
		if strings.HasSuffix(imageTag(c.Image), suffix) {
			return true
		}
	}
	return false
}
