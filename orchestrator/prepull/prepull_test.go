package prepull

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nodewise/nodewise/orchestrator/model"
)

const istioNS = "istio-system"

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
		pulled, failed := podPull(tc.p)
		if pulled != tc.pulled || (failed != "") != tc.failed {
			t.Errorf("%s: pulled %v failed %q, want pulled %v failed %v", name, pulled, failed, tc.pulled, tc.failed)
		}
	}
	if _, failed := podPull(pod(waiting("ErrImagePull"))); !strings.Contains(failed, "image istio/ztunnel:a on node n1 failed: ErrImagePull") {
		t.Errorf("failure %q does not name image and node", failed)
	}
}

// TestPrepullViewNeedsEveryTargetsPod: a node's pre-pull is pulled only when
// each target with images has its pod and every pod is past its pulls; a
// missing one is reported (to be created), a failed one halts.
func TestPrepullViewNeedsEveryTargetsPod(t *testing.T) {
	want := map[string]bool{istioNS + "/istio-cni-node": true, istioNS + "/ztunnel": true}
	pod := func(target, reason string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: Name("r", "n1", target), Namespace: istioNS, Labels: map[string]string{model.LabelPrepullTarget: target}},
			Spec:   corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "pull-0"}}},
			Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Image: target + ":new", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason}}}}}}
	}
	for name, tc := range map[string]struct {
		pods []*corev1.Pod
		want model.PrepullView
	}{
		"both pulled":     {[]*corev1.Pod{pod("ztunnel", "RunContainerError"), pod("istio-cni-node", "RunContainerError")}, model.PrepullView{Exists: true, Pulled: true}},
		"one missing":     {[]*corev1.Pod{pod("ztunnel", "RunContainerError")}, model.PrepullView{Exists: true, Missing: true}},
		"one pulling":     {[]*corev1.Pod{pod("ztunnel", "RunContainerError"), pod("istio-cni-node", "ContainerCreating")}, model.PrepullView{Exists: true}},
		"one pull failed": {[]*corev1.Pod{pod("ztunnel", "ErrImagePull"), pod("istio-cni-node", "RunContainerError")}, model.PrepullView{Exists: true, Failed: "pre-pull of image ztunnel:new on node n1 failed: ErrImagePull: "}},
	} {
		if got := View(tc.pods, want); got != tc.want {
			t.Errorf("%s: %+v, want %+v", name, got, tc.want)
		}
	}
}

// TestPrepullNameIsAValidName: a name past 253 characters is cut, and a
// hash of the whole keeps two targets' pods apart.
func TestPrepullNameIsAValidName(t *testing.T) {
	if got := Name("r", "n1", "ztunnel"); got != "nodewise-prepull-r-n1-ztunnel" {
		t.Errorf("name %q", got)
	}
	long := func(target string) string {
		return Name(strings.Repeat("r", 200), strings.Repeat("n", 100), target)
	}
	a, b := long("ztunnel"), long("istio-cni-node")
	if len(a) != 253 || len(b) != 253 || a == b {
		t.Errorf("names of %d and %d characters (equal: %v), want 253 and distinct", len(a), len(b), a == b)
	}
	if errs := validation.IsDNS1123Subdomain(a); len(errs) != 0 {
		t.Errorf("%s: %v", a, errs)
	}
}
