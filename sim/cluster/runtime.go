package cluster

import (
	"context"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Runtime runs a pod's containers for the simulated kubelet. It is the seam
// through which a live data plane attaches real processes to chosen pods; the
// default runs nothing, so a pod is "up" as soon as the kubelet says so.
type Runtime interface {
	// Start starts the pod's containers with the pod IP the kubelet allocated.
	// An error leaves the pod Pending in ContainerCreating; the kubelet retries,
	// as a real kubelet does when the CNI plugin is not ready.
	Start(ctx context.Context, pod *corev1.Pod, podIP string) error
	// Stop delivers SIGTERM and returns once the containers have exited. ctx
	// ends when the pod's grace period runs out: the kubelet then kills the
	// containers, so Stop must return promptly after that.
	Stop(ctx context.Context, pod *corev1.Pod)
}

// AnnotationStopAfter makes the default runtime's containers take this long
// (a Go duration) to exit after SIGTERM, capped by the grace period. It lets a
// test model a process that drains, such as ztunnel, without a process.
const AnnotationStopAfter = "sim.nodewise.io/stop-after"

// AnnotationStartAfter makes the simulated kubelet start a pod's containers
// (and report it Running and Ready) this long (a Go duration) after the pod
// was created, instead of the cluster's ReadyDelay: a slow-starting build.
const AnnotationStartAfter = "sim.nodewise.io/start-after"

// startDelay is how long after its creation a pod starts.
func startDelay(pod *corev1.Pod, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(pod.Annotations[AnnotationStartAfter]); err == nil && d > 0 {
		return d
	}
	return def
}

// nullRuntime runs no process. Containers stop at once, or after the pod's
// AnnotationStopAfter duration.
type nullRuntime struct{}

func (nullRuntime) Start(context.Context, *corev1.Pod, string) error { return nil }

func (nullRuntime) Stop(ctx context.Context, pod *corev1.Pod) {
	d, err := time.ParseDuration(pod.Annotations[AnnotationStopAfter])
	if err != nil || d <= 0 {
		return
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// Image tag suffixes that inject faults.
const (
	// TagNeverReady: the container runs but never becomes Ready.
	TagNeverReady = "-neverready"
	// TagCrashLoop: the container keeps exiting and restarting.
	TagCrashLoop = "-crashloop"
	// TagNoPull: the image cannot be pulled; the pod stays Pending, its
	// container waiting in ErrImagePull, as a kubelet reports a missing tag.
	TagNoPull = "-nopull"
)

// imageTag returns the tag of an image reference ("" when it has none).
func imageTag(image string) string {
	if i := strings.Index(image, "@"); i >= 0 {
		image = image[:i]
	}
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		return ""
	}
	return image[i+1:]
}
