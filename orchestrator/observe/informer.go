package observe

import (
	"context"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// NewRolloutInformer watches NodeRollouts through the typed client.
func NewRolloutInformer(c v1alpha1.NodeRolloutInterface) cache.SharedIndexInformer {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return c.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return c.Watch(ctx, opts)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &v1alpha1.NodeRollout{}, 0, cache.Indexers{})
	_ = inf.SetTransform(TrimCached) // only fails once started
	return inf
}

// TrimCached is the transform of every informer the orchestrator runs. A
// cached copy keeps only what the orchestrator reads:
//   - every object drops its managedFields, a large share of its size;
//   - a pod that is not a DaemonSet's (nor a bridge of one) is slimmed to
//     what the readiness gate and drain auto read (slimPod): a cache of a
//     thousand nodes holds ten thousand such pods or more, and their specs
//     and container statuses are most of its memory;
//   - a node drops its image list and attached volumes;
//   - a ControllerRevision drops its data (the template it records: the
//     orchestrator reads the DaemonSet's template, and only the revision's
//     number, hash label and owner).
//
// The pods the swaps act on (a DaemonSet's, bridges, handed-over bridges:
// all carry the controller-revision-hash label) stay whole.
func TrimCached(obj any) (any, error) {
	if a, err := meta.Accessor(obj); err == nil {
		a.SetManagedFields(nil)
	}
	switch o := obj.(type) {
	case *corev1.Pod:
		if !daemonLike(o) {
			return slimPod(o), nil
		}
	case *corev1.Node:
		o.Status.Images, o.Status.VolumesAttached, o.Status.VolumesInUse = nil, nil, nil
	case *appsv1.ControllerRevision:
		o.Data = runtime.RawExtension{}
	}
	return obj, nil
}

// daemonLike: a pod a swap may act on or wait for: one with the
// controller-revision-hash label (a DaemonSet's, nodewise's bridges, a
// bridge handed over) or controlled by a DaemonSet; or a pre-pull pod.
func daemonLike(p *corev1.Pod) bool {
	if _, ok := p.Labels[model.LabelControllerRevisionHash]; ok {
		return true
	}
	if _, ok := p.Labels[model.LabelPrepull]; ok {
		return true // its container states are the pull's outcome (orchestrator/prepull)
	}
	return model.ControllerKind(p) == "DaemonSet"
}

// slimPod is what the orchestrator reads of a pod it never acts on: its
// identity, labels, owners, finalizers, creation and deletion, the mirror
// annotation (drain auto, nodestep.MovablePods), the node it is bound to, its phase,
// start time and Ready condition (the readiness gate, gate.SoakReadiness; drain
// auto, nodestep.PodStart). Everything else (spec, container statuses, other
// annotations, other conditions) is dropped.
func slimPod(p *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{
		TypeMeta: p.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp,
			Labels: p.Labels, OwnerReferences: p.OwnerReferences, Finalizers: p.Finalizers,
		},
		Spec:   corev1.PodSpec{NodeName: p.Spec.NodeName},
		Status: corev1.PodStatus{Phase: p.Status.Phase, StartTime: p.Status.StartTime},
	}
	if v, ok := p.Annotations[corev1.MirrorPodAnnotationKey]; ok {
		out.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: v}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			out.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status, LastTransitionTime: c.LastTransitionTime}}
		}
	}
	return out
}

// podNodeIndex indexes the cached pods by the node they are bound to, so a
// step on one node reads that node's pods instead of every pod in the
// cluster (at 1,000 nodes and 11 pods each, a per-node scan of every pod was
// most of the orchestrator's CPU).
const podNodeIndex = "spec.nodeName"

func podNodeIndexFunc(obj any) ([]string, error) {
	if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
		return []string{p.Spec.NodeName}, nil
	}
	return nil, nil
}

// PodCache is the orchestrator's view of the cached pods: the lister, and
// the pods bound to one node from the node index.
type PodCache struct {
	corelisters.PodLister
	// Index has podNodeIndex; nil (a cache built for one plan, a test) makes
	// OnNode filter every pod instead.
	Index cache.Indexer
}

// NewPodCache is the PodCache of an informer's indexer that has
// podNodeIndex (see AddPodNodeIndex).
func NewPodCache(idx cache.Indexer) PodCache {
	return PodCache{PodLister: corelisters.NewPodLister(idx), Index: idx}
}

// AddPodNodeIndex adds podNodeIndex to the pod informer (before it starts).
func AddPodNodeIndex(inf cache.SharedIndexInformer) error {
	return inf.AddIndexers(cache.Indexers{podNodeIndex: podNodeIndexFunc})
}

// IndexPodsByNode adds podNodeIndex to a pod indexer (a cache fed without
// an informer).
func IndexPodsByNode(idx cache.Indexer) error {
	return idx.AddIndexers(cache.Indexers{podNodeIndex: podNodeIndexFunc})
}

// OnNode returns the cached pods bound to node, in every namespace.
func (c PodCache) OnNode(node string) ([]*corev1.Pod, error) {
	if c.Index == nil {
		all, err := c.List(labels.Everything())
		if err != nil {
			return nil, err
		}
		var out []*corev1.Pod
		for _, p := range all {
			if p.Spec.NodeName == node {
				out = append(out, p)
			}
		}
		return out, nil
	}
	objs, err := c.Index.ByIndex(podNodeIndex, node)
	if err != nil {
		return nil, err
	}
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			out = append(out, p)
		}
	}
	return out, nil
}
