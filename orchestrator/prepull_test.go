package orchestrator

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestPrepullViewReadsContainerStates(t *testing.T) {
	pod := func(states ...corev1.ContainerState) *corev1.Pod {
		p := &corev1.Pod{Spec: corev1.PodSpec{NodeName: "n1"}}
		for i, s := range states {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "c"})
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Image: "istio/ztunnel:" + string(rune('a'+i)), State: s})
		}
		return p
	}
	waiting := func(r string) corev1.ContainerState {
		return corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: r, Message: "m"}}
	}
	term := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "StartError", ExitCode: 128}}
	for name, tc := range map[string]struct {
		p              *corev1.Pod
		pulled, failed bool
	}{
		"creating":                     {pod(waiting("ContainerCreating")), false, false},
		"no status yet":                {&corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{}}}}, false, false},
		"both past the pull":           {pod(term, waiting("CreateContainerError")), true, false},
		"one pull failed":              {pod(term, waiting("ImagePullBackOff")), false, true},
		"running (a sim, or an image)": {pod(corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}), true, false},
	} {
		v := prepullView(tc.p)
		if v.Pulled != tc.pulled || (v.Failed != "") != tc.failed {
			t.Errorf("%s: %+v, want pulled %v failed %v", name, v, tc.pulled, tc.failed)
		}
	}
	if v := prepullView(pod(waiting("ErrImagePull"))); !strings.Contains(v.Failed, "image istio/ztunnel:a on node n1 failed: ErrImagePull") {
		t.Errorf("failure %q does not name image and node", v.Failed)
	}
}
