package orchestrator

import (
	"errors"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/planner"
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

// TestPrepullCreatesAndDeletesThePod: ActPrepull creates, in the first
// target's namespace, a pod bound to the node with one container per new
// target image whose command does not exist, owned by the rollout;
// ActPrepullDone deletes it at once. Both are idempotent (an existing or
// missing pod is fine); any other API error is returned.
func TestPrepullCreatesAndDeletesThePod(t *testing.T) {
	nr := rollout("r", func(nr *v1alpha1.NodeRollout) { nr.Spec.Prepull = true })
	p := model.MustPolicy(nr.Spec)
	name := prepullName("r", "n1")
	forbidden := func(verb string) func(k8stesting.Action) (bool, runtime.Object, error) {
		return func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, name, errors.New("RBAC "+verb))
		}
	}

	e := newEnv(t, cluster(fixture.OldHash, "n1")...)
	if err := e.ex.prepull(e.ctx, nr, p, planner.Action{Kind: planner.ActPrepull, Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	pod, err := e.kube.CoreV1().Pods(istioNS).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Spec.NodeName != "n1" || pod.Labels[model.LabelPrepull] != "r" || len(pod.OwnerReferences) != 1 || pod.OwnerReferences[0].UID != nr.UID {
		t.Errorf("pod %+v, want bound to n1, labelled and owned by r", pod.ObjectMeta)
	}
	var images []string
	for _, c := range pod.Spec.Containers {
		images = append(images, c.Image)
		if len(c.Command) != 1 || c.Command[0] != prepullCommand {
			t.Errorf("container %s runs %v, want %s", c.Name, c.Command, prepullCommand)
		}
	}
	if !slices.Equal(images, []string{"docker.io/istio/install-cni:1.28.1", "docker.io/istio/ztunnel:1.28.1"}) {
		t.Errorf("images %v, want both targets' new images", images)
	}
	if len(pod.Spec.Tolerations) == 0 || pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("pod spec %+v, want a daemon's tolerations and no restarts", pod.Spec)
	}
	// Again: it exists, which is fine.
	if err := e.ex.prepull(e.ctx, nr, p, planner.Action{Kind: planner.ActPrepull, Node: "n1"}); err != nil {
		t.Errorf("second create: %v", err)
	}
	e.kube.PrependReactor("create", "pods", forbidden("create"))
	if err := e.ex.prepull(e.ctx, nr, p, planner.Action{Kind: planner.ActPrepull, Node: "n2"}); !apierrors.IsForbidden(err) {
		t.Errorf("refused create: %v, want Forbidden", err)
	}

	done := planner.Action{Kind: planner.ActPrepullDone, Node: "n1"}
	if err := e.ex.prepull(e.ctx, nr, p, done); err != nil {
		t.Fatal(err)
	}
	if _, err := e.kube.CoreV1().Pods(istioNS).Get(e.ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pre-pull pod still there: %v", err)
	}
	if err := e.ex.prepull(e.ctx, nr, p, done); err != nil {
		t.Errorf("deleting a missing pod: %v", err)
	}
	e.kube.PrependReactor("delete", "pods", forbidden("delete"))
	if err := e.ex.prepull(e.ctx, nr, p, done); !apierrors.IsForbidden(err) {
		t.Errorf("refused delete: %v, want Forbidden", err)
	}
}

// TestPrepullWithoutImages creates nothing: the targets are not in the
// cache, so there is no image to pull.
func TestPrepullWithoutImages(t *testing.T) {
	e := newEnv(t, testNode("n1"))
	nr := rollout("r", nil)
	if err := e.ex.prepull(e.ctx, nr, model.MustPolicy(nr.Spec), planner.Action{Kind: planner.ActPrepull, Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	for _, a := range e.kube.Actions() {
		if a.GetVerb() == "create" {
			t.Errorf("created %v with no image to pull", a)
		}
	}
}

// TestPrepullNameIsAValidName: a name past 253 characters is cut.
func TestPrepullNameIsAValidName(t *testing.T) {
	if got := prepullName("r", "n1"); got != "nodewise-prepull-r-n1" {
		t.Errorf("name %q", got)
	}
	if got := prepullName(strings.Repeat("r", 200), strings.Repeat("n", 100)); len(got) != 253 {
		t.Errorf("name of %d characters, want 253", len(got))
	}
}

// TestReconcilePrepullsBeforeStarting: with spec.prepull a due node gets its
// pre-pull pod first and does not start (no finalizer: nothing is held);
// once its images are pulled the pod is deleted and the node starts.
func TestReconcilePrepullsBeforeStarting(t *testing.T) {
	e := newEnv(t, append(cluster(fixture.OldHash, "n1"), rollout("r", func(nr *v1alpha1.NodeRollout) { nr.Spec.Prepull = true }))...)
	if err := e.pass("r"); err != nil {
		t.Fatal(err)
	}
	pod, err := e.kube.CoreV1().Pods(istioNS).Get(e.ctx, prepullName("r", "n1"), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("no pre-pull pod: %v", err)
	}
	if e.ex.claims.Holds("r") || slices.Contains(e.stored("r").Finalizers, model.FinalizerReleaseNodes) {
		t.Error("the node started before its images were pulled")
	}
	if p := e.stored("r").Status.Phase; p != v1alpha1.PhaseProgressing {
		t.Errorf("phase %s, want Progressing", p)
	}
	// The kubelet pulled both images (the containers then fail to start).
	for range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "RunContainerError"}}})
	}
	_ = e.pods.Add(pod)
	if err := e.pass("r"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.kube.CoreV1().Pods(istioNS).Get(e.ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("pre-pull pod not deleted before the start: %v", err)
	}
	if !slices.Contains(e.stored("r").Finalizers, model.FinalizerReleaseNodes) {
		t.Error("the node did not start once pulled")
	}
}
