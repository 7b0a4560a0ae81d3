package cluster

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// runningStatus is the status a kubelet reports once the pod's containers run.
func runningStatus(pod *corev1.Pod, node *NodeSpec, ip string, now time.Time) *corev1.PodStatus {
	t := metav1.NewTime(now)
	s := pod.Status.DeepCopy()
	s.Phase = corev1.PodRunning
	s.HostIP, s.HostIPs = node.IP, []corev1.HostIP{{IP: node.IP}}
	s.PodIP, s.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	s.StartTime = &t
	// The API server set the QoS class at creation and refuses a status
	// that changes it (a chart's pods with requests are Burstable).
	if s.QOSClass == "" {
		s.QOSClass = podQOS(pod)
	}
	allReady := true
	running := func(c corev1.Container) corev1.ContainerStatus {
		tag := imageTag(c.Image)
		ready := !strings.HasSuffix(tag, TagNeverReady) && !strings.HasSuffix(tag, TagCrashLoop)
		allReady = allReady && ready
		started := true
		return corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: imageID(c.Image), ContainerID: containerID(pod.UID, c.Name),
			Ready: ready, Started: &started,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: t}},
		}
	}
	s.InitContainerStatuses = nil
	for _, c := range pod.Spec.InitContainers {
		// A native sidecar (restartPolicy Always: istiod injects istio-proxy
		// so) keeps running beside the containers, and counts for Ready.
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			s.InitContainerStatuses = append(s.InitContainerStatuses, running(c))
			continue
		}
		s.InitContainerStatuses = append(s.InitContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: imageID(c.Image), ContainerID: containerID(pod.UID, c.Name),
			Ready: true,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: 0, Reason: "Completed", StartedAt: t, FinishedAt: t}},
		})
	}
	s.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		s.ContainerStatuses = append(s.ContainerStatuses, running(c))
	}
	ready := corev1.ConditionFalse
	reason := "ContainersNotReady"
	if allReady {
		ready, reason = corev1.ConditionTrue, ""
	}
	setCondition(s, corev1.PodReadyToStartContainers, corev1.ConditionTrue, "", t)
	setCondition(s, corev1.PodInitialized, corev1.ConditionTrue, "", t)
	setCondition(s, corev1.ContainersReady, ready, reason, t)
	setCondition(s, corev1.PodReady, ready, reason, t)
	return s
}

// containerCreating is the status of a pod whose sandbox cannot start yet.
func containerCreating(pod *corev1.Pod, cause error) *corev1.PodStatus {
	s := pod.Status.DeepCopy()
	s.Phase = corev1.PodPending
	s.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		s.ContainerStatuses = append(s.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
				Reason: "ContainerCreating", Message: cause.Error()}},
		})
	}
	setCondition(s, corev1.PodReadyToStartContainers, corev1.ConditionFalse, "", metav1.Now())
	return s
}

// pullFailed is the status of a pod one of whose images cannot be pulled
// (TagNoPull): Pending, that container waiting in ErrImagePull.
func pullFailed(pod *corev1.Pod) *corev1.PodStatus {
	s := containerCreating(pod, fmt.Errorf("waiting for the images"))
	for i, c := range pod.Spec.Containers {
		if strings.HasSuffix(imageTag(c.Image), TagNoPull) {
			s.ContainerStatuses[i].State.Waiting = &corev1.ContainerStateWaiting{Reason: "ErrImagePull",
				Message: fmt.Sprintf("failed to pull and unpack image %q: not found (simulated: tag ends in %s)", c.Image, TagNoPull)}
		}
	}
	return s
}

func setCondition(s *corev1.PodStatus, t corev1.PodConditionType, status corev1.ConditionStatus, reason string, now metav1.Time) {
	for i := range s.Conditions {
		if s.Conditions[i].Type == t {
			if s.Conditions[i].Status != status {
				s.Conditions[i].LastTransitionTime = now
			}
			s.Conditions[i].Status, s.Conditions[i].Reason = status, reason
			return
		}
	}
	s.Conditions = append(s.Conditions, corev1.PodCondition{Type: t, Status: status, Reason: reason, LastTransitionTime: now})
}

// imageID is a stable, fake digest of the image reference.
func imageID(image string) string {
	sum := sha256.Sum256([]byte(image))
	repo := image
	if i := strings.LastIndex(image, ":"); i > 0 && !strings.Contains(image[i:], "/") {
		repo = image[:i]
	}
	return fmt.Sprintf("%s@sha256:%x", repo, sum)
}

func containerID(uid types.UID, name string) string {
	sum := sha256.Sum256([]byte(string(uid) + "/" + name))
	return fmt.Sprintf("sim://%x", sum[:16])
}

// ipam hands out pod IPs from each node's /24, never twice at once.
type ipam map[string]map[types.UID]string // node -> pod UID -> IP

func (a ipam) allocate(node *NodeSpec, uid types.UID) (string, error) {
	byPod := a[node.Name]
	if byPod == nil {
		byPod = map[types.UID]string{}
		a[node.Name] = byPod
	}
	if ip, ok := byPod[uid]; ok {
		return ip, nil
	}
	used := map[string]bool{}
	for _, ip := range byPod {
		used[ip] = true
	}
	for host := 2; host < 255; host++ { // .1 is the node's gateway
		ip := fmt.Sprintf("%s.%d", node.cidrPrefix(), host)
		if !used[ip] {
			byPod[uid] = ip
			return ip, nil
		}
	}
	return "", fmt.Errorf("node %s has no free pod IP in %s", node.Name, node.PodCIDR)
}

func (a ipam) claim(node *NodeSpec, uid types.UID, ip string) {
	if a[node.Name] == nil {
		a[node.Name] = map[types.UID]string{}
	}
	a[node.Name][uid] = ip
}

func (a ipam) release(node *NodeSpec, uid types.UID) { delete(a[node.Name], uid) }

// podQOS is the pod's QoS class as the API server computes it at creation
// (for a pod whose status does not carry it yet): BestEffort without any CPU
// or memory request or limit, Guaranteed when every container limits both
// and requests equal limits, Burstable otherwise.
func podQOS(pod *corev1.Pod) corev1.PodQOSClass {
	some, guaranteed := false, true
	for _, c := range append(append([]corev1.Container(nil), pod.Spec.InitContainers...), pod.Spec.Containers...) {
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, hasReq := c.Resources.Requests[r]
			lim, hasLim := c.Resources.Limits[r]
			some = some || (hasReq && !req.IsZero()) || (hasLim && !lim.IsZero())
			if !hasLim || (hasReq && req.Cmp(lim) != 0) {
				guaranteed = false
			}
		}
	}
	switch {
	case !some:
		return corev1.PodQOSBestEffort
	case guaranteed:
		return corev1.PodQOSGuaranteed
	}
	return corev1.PodQOSBurstable
}
