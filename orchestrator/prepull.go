package orchestrator

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strings"

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

// PrepullCommand is a path no image has: the container fails to start
// after its image is pulled, and nothing of the image ever runs. The chart's
// admission policy nodewise-prepull-only admits no other command.
const PrepullCommand = "/nodewise-prepull-does-not-run"

// pullFailures are the container waiting reasons of an image that could not
// be pulled (the kubelet's images package).
var pullFailures = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true,
	"ErrImageNeverPull": true, "RegistryUnavailable": true, "SignatureValidationFailed": true,
}

// podPull reads one pre-pull pod's container states: whether every container
// got past its pull, or the first pull that failed.
func podPull(pod *corev1.Pod) (pulled bool, failed string) {
	n := 0
	for _, cs := range pod.Status.ContainerStatuses {
		w := cs.State.Waiting
		switch {
		case w != nil && pullFailures[w.Reason]:
			if failed == "" {
				failed = fmt.Sprintf("pre-pull of image %s on node %s failed: %s: %s", cs.Image, pod.Spec.NodeName, w.Reason, w.Message)
			}
		case w == nil || (w.Reason != "ContainerCreating" && w.Reason != "PodInitializing" && w.Reason != ""):
			n++
		}
	}
	return failed == "" && n > 0 && n == len(pod.Spec.Containers), failed
}

// prepullView reads a node's pre-pull pods (one per target of want, the
// targets with images to pull, as namespace/name): pulled once every one of
// them exists and got past its pulls; the first failure (by pod name) halts.
func prepullView(pods []*corev1.Pod, want map[string]bool) model.PrepullView {
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	v := model.PrepullView{Exists: len(pods) > 0, Pulled: len(pods) > 0}
	seen := map[string]bool{}
	for _, p := range pods {
		seen[p.Namespace+"/"+p.Labels[model.LabelPrepullTarget]] = true
		pulled, failed := podPull(p)
		v.Pulled = v.Pulled && pulled
		if v.Failed == "" {
			v.Failed = failed
		}
	}
	for t := range want {
		if !seen[t] {
			v.Missing = true
		}
	}
	v.Pulled = v.Pulled && !v.Missing && v.Failed == ""
	return v
}

// prepullName is the pre-pull pod of rollout on node for the target
// DaemonSet; past 253 characters it is cut and a hash of the whole keeps it
// unique.
func prepullName(rollout, node, target string) string {
	name := "nodewise-prepull-" + rollout + "-" + node + "-" + target
	if len(name) <= 253 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return strings.TrimRight(name[:253-9], "-.") + "-" + hex.EncodeToString(sum[:4])
}

// PrepullPod is the pod that pulls target's new images on node for rollout
// nr: one container per image of the DaemonSet's template, each with
// PrepullCommand, bound to the node, owned by the rollout, labelled with the
// rollout and the DaemonSet (the chart's binding of nodewise-prepull-only
// for that DaemonSet checks it against the template). It runs nothing and
// holds nothing: no volumes, no ServiceAccount token, no securityContext.
// Nil when the target has no image (its DaemonSet is not in the cache).
func PrepullPod(nr *v1alpha1.NodeRollout, node string, tv model.TargetView) *corev1.Pod {
	spec := corev1.PodSpec{
		NodeName:                      node,
		RestartPolicy:                 corev1.RestartPolicyNever,
		TerminationGracePeriodSeconds: nodestep.Ptr[int64](0),
		AutomountServiceAccountToken:  nodestep.Ptr(false),
		EnableServiceLinks:            nodestep.Ptr(false),
		ImagePullSecrets:              tv.ImagePullSecrets,
	}
	swap.AddDaemonTolerations(&spec)
	var images []string
	for _, img := range tv.Images {
		if !slices.Contains(images, img) {
			images = append(images, img)
		}
	}
	for i, img := range images {
		spec.Containers = append(spec.Containers, corev1.Container{
			Name: fmt.Sprintf("pull-%d", i), Image: img,
			ImagePullPolicy: corev1.PullIfNotPresent, Command: []string{PrepullCommand},
		})
	}
	if len(spec.Containers) == 0 {
		return nil
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: tv.Ref.Namespace, Name: prepullName(nr.Name, node, tv.Ref.Name),
			Labels:          map[string]string{model.LabelPrepull: nr.Name, model.LabelPrepullTarget: tv.Ref.Name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeRollout", Name: nr.Name, UID: nr.UID}},
		},
		Spec: spec,
	}
}

// prepullPods maps each node to its pre-pull pods of the rollout, from the
// pod cache (the target namespaces).
func (e *executor) prepullPods(rollout string, targets []model.TargetView) (map[string]model.PrepullView, error) {
	byNode := map[string][]*corev1.Pod{}
	for _, ns := range targetNamespaces(targets) {
		pods, err := e.pods.Pods(ns).List(labels.SelectorFromSet(labels.Set{model.LabelPrepull: rollout}))
		if err != nil {
			return nil, fmt.Errorf("listing pre-pull pods: %w", err)
		}
		for _, p := range pods {
			if p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
				byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
			}
		}
	}
	want := prepullWant(targets)
	out := map[string]model.PrepullView{}
	for node, pods := range byNode {
		out[node] = prepullView(pods, want)
	}
	return out, nil
}

// prepullWant is the targets with images to pre-pull, by key.
func prepullWant(targets []model.TargetView) map[string]bool {
	want := map[string]bool{}
	for _, tv := range targets {
		if len(tv.Images) > 0 {
			want[tv.Key()] = true
		}
	}
	return want
}

// targetNamespaces is the targets' namespaces, each once, in order.
func targetNamespaces(targets []model.TargetView) []string {
	var namespaces []string
	for _, tv := range targets {
		if !slices.Contains(namespaces, tv.Ref.Namespace) {
			namespaces = append(namespaces, tv.Ref.Namespace)
		}
	}
	return namespaces
}

// prepull creates (ActPrepull) or deletes (ActPrepullDone) a node's
// pre-pull pods, one per target. Both are idempotent: an existing or missing
// pod is fine.
func (e *executor) prepull(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, a planner.Action) error {
	for _, ref := range p.Targets {
		if a.Kind == planner.ActPrepullDone {
			name := prepullName(nr.Name, a.Node, ref.Name)
			err := e.kube.CoreV1().Pods(ref.Namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: nodestep.Ptr[int64](0)})
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting pre-pull pod %s/%s: %w", ref.Namespace, name, err)
			}
			continue
		}
		tv, err := e.targets.Target(ref)
		if err != nil {
			return err
		}
		pod := PrepullPod(nr, a.Node, tv)
		if pod == nil {
			continue
		}
		if _, err := e.kube.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{FieldManager: model.FieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating pre-pull pod %s/%s on %s: %w", pod.Namespace, pod.Name, a.Node, err)
		}
	}
	return nil
}
