package orchestrator

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/planner"
	"github.com/nodewise/nodewise/orchestrator/swap"
)

// prepullCommand is a path no image has: the container fails to start
// after its image is pulled, and nothing of the image ever runs.
const prepullCommand = "/nodewise-prepull-does-not-run"

// pullFailures are the container waiting reasons of an image that could not
// be pulled (the kubelet's images package).
var pullFailures = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true,
	"ErrImageNeverPull": true, "RegistryUnavailable": true, "SignatureValidationFailed": true,
}

// prepullView reads a pre-pull pod's container states.
func prepullView(pod *corev1.Pod) model.PrepullView {
	v := model.PrepullView{Exists: true}
	pulled := 0
	for _, cs := range pod.Status.ContainerStatuses {
		w := cs.State.Waiting
		switch {
		case w != nil && pullFailures[w.Reason]:
			if v.Failed == "" {
				v.Failed = fmt.Sprintf("pre-pull of image %s on node %s failed: %s: %s", cs.Image, pod.Spec.NodeName, w.Reason, w.Message)
			}
		case w == nil || (w.Reason != "ContainerCreating" && w.Reason != "PodInitializing" && w.Reason != ""):
			pulled++
		}
	}
	v.Pulled = v.Failed == "" && pulled > 0 && pulled == len(pod.Spec.Containers)
	return v
}

func prepullName(rollout, node string) string {
	name := "nodewise-prepull-" + rollout + "-" + node
	if len(name) > 253 {
		name = name[:253]
	}
	return name
}

// prepullPods maps each node to its pre-pull pod of the rollout, from the
// cache (in the first target's namespace, where prepull creates them).
func (e *executor) prepullPods(rollout string, targets []v1alpha1.TargetRef) (map[string]model.PrepullView, error) {
	if len(targets) == 0 {
		return nil, nil
	}
	pods, err := e.pods.Pods(targets[0].Namespace).List(labels.SelectorFromSet(labels.Set{model.LabelPrepull: rollout}))
	if err != nil {
		return nil, fmt.Errorf("listing pre-pull pods: %w", err)
	}
	out := map[string]model.PrepullView{}
	for _, p := range pods {
		if p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
			out[p.Spec.NodeName] = prepullView(p)
		}
	}
	return out, nil
}

// prepull creates (ActPrepull) or deletes (ActPrepullDone) a node's
// pre-pull pod. Both are idempotent: an existing or missing pod is fine.
func (e *executor) prepull(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, a planner.Action) error {
	ns := p.Targets[0].Namespace
	name := prepullName(nr.Name, a.Node)
	if a.Kind == planner.ActPrepullDone {
		err := e.kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: nodestep.Ptr[int64](0)})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting pre-pull pod %s/%s: %w", ns, name, err)
		}
		return nil
	}
	spec := corev1.PodSpec{
		NodeName:                      a.Node,
		RestartPolicy:                 corev1.RestartPolicyNever,
		TerminationGracePeriodSeconds: nodestep.Ptr[int64](0),
		AutomountServiceAccountToken:  nodestep.Ptr(false),
		EnableServiceLinks:            nodestep.Ptr(false),
	}
	swap.AddDaemonTolerations(&spec)
	for _, ref := range p.Targets {
		tv, err := e.targets.Target(ref)
		if err != nil {
			return err
		}
		for _, img := range tv.Images {
			spec.Containers = append(spec.Containers, corev1.Container{
				Name: fmt.Sprintf("pull-%d", len(spec.Containers)), Image: img,
				ImagePullPolicy: corev1.PullIfNotPresent, Command: []string{prepullCommand},
			})
		}
	}
	if len(spec.Containers) == 0 {
		return nil
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name, Labels: map[string]string{model.LabelPrepull: nr.Name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeRollout", Name: nr.Name, UID: nr.UID}},
		},
		Spec: spec,
	}
	if _, err := e.kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{FieldManager: model.FieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating pre-pull pod %s/%s on %s: %w", ns, name, a.Node, err)
	}
	return nil
}
