// Package prepull makes and reads the pods that pull a rollout's new images
// on a node before its swap: each runs nothing (Command), and the node is
// pulled once every pod got past its pulls.
package prepull

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
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/swap"
)

// Command is a path no image has: the container fails to start
// after its image is pulled, and nothing of the image ever runs. The chart's
// admission policy nodewise-prepull-only admits no other command.
const Command = "/nodewise-prepull-does-not-run"

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

// View reads a node's pre-pull pods (one per target of want, the
// targets with images to pull, as namespace/name): pulled once every one of
// them exists and got past its pulls; the first failure (by pod name) halts.
func View(pods []*corev1.Pod, want map[string]bool) model.PrepullView {
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

// Name is the pre-pull pod of rollout on node for the target
// DaemonSet; past 253 characters it is cut and a hash of the whole keeps it
// unique.
func Name(rollout, node, target string) string {
	name := "nodewise-prepull-" + rollout + "-" + node + "-" + target
	if len(name) <= 253 {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return strings.TrimRight(name[:253-9], "-.") + "-" + hex.EncodeToString(sum[:4])
}

// Pod is the pod that pulls target's new images on node for rollout
// nr: one container per image of the DaemonSet's template, each with
// Command, bound to the node, owned by the rollout, labelled with the
// rollout and the DaemonSet (the chart's binding of nodewise-prepull-only
// for that DaemonSet checks it against the template). It runs nothing and
// holds nothing: no volumes, no ServiceAccount token, no securityContext.
// Nil when the target has no image (its DaemonSet is not in the cache).
func Pod(nr *v1alpha1.NodeRollout, node string, tv model.TargetView) *corev1.Pod {
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
			ImagePullPolicy: corev1.PullIfNotPresent, Command: []string{Command},
		})
	}
	if len(spec.Containers) == 0 {
		return nil
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: tv.Ref.Namespace, Name: Name(nr.Name, node, tv.Ref.Name),
			Labels:          map[string]string{model.LabelPrepull: nr.Name, model.LabelPrepullTarget: tv.Ref.Name},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeRollout", Name: nr.Name, UID: nr.UID}},
		},
		Spec: spec,
	}
}

// Want is the targets with images to pre-pull, by key.
func Want(targets []model.TargetView) map[string]bool {
	want := map[string]bool{}
	for _, tv := range targets {
		if len(tv.Images) > 0 {
			want[tv.Key()] = true
		}
	}
	return want
}

// Create creates node's pre-pull pod of target tv for rollout nr; an
// existing pod is fine.
func Create(ctx context.Context, kube kubernetes.Interface, nr *v1alpha1.NodeRollout, node string, tv model.TargetView) error {
	pod := Pod(nr, node, tv)
	if pod == nil {
		return nil
	}
	if _, err := kube.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{FieldManager: model.FieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating pre-pull pod %s/%s on %s: %w", pod.Namespace, pod.Name, node, err)
	}
	return nil
}

// Delete deletes node's pre-pull pod of target ref for rollout nr; a
// missing pod is fine.
func Delete(ctx context.Context, kube kubernetes.Interface, nr *v1alpha1.NodeRollout, node string, ref v1alpha1.TargetRef) error {
	name := Name(nr.Name, node, ref.Name)
	err := kube.CoreV1().Pods(ref.Namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: nodestep.Ptr[int64](0)})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting pre-pull pod %s/%s: %w", ref.Namespace, name, err)
	}
	return nil
}
