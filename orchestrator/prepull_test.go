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
	"k8s.io/apimachinery/pkg/util/validation"
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
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: prepullName("r", "n1", target), Namespace: istioNS, Labels: map[string]string{model.LabelPrepullTarget: target}},
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
		if got := prepullView(tc.pods, want); got != tc.want {
			t.Errorf("%s: %+v, want %+v", name, got, tc.want)
		}
	}
}

// TestPrepullCreatesAndDeletesThePods: ActPrepull creates, in each target's
// namespace, one pod per target bound to the node with one container per new
// image of that target whose command does not exist, owned by the rollout
// and labelled with it and the target (what the chart's nodewise-prepull-only
// admits); ActPrepullDone deletes them at once. Both are idempotent (an
// existing or missing pod is fine); any other API error is returned.
func TestPrepullCreatesAndDeletesThePods(t *testing.T) {
	nr := rollout("r", func(nr *v1alpha1.NodeRollout) { nr.Spec.Prepull = true })
	p := model.MustPolicy(nr.Spec)
	name := prepullName("r", "n1", "ztunnel")
	forbidden := func(verb string) func(k8stesting.Action) (bool, runtime.Object, error) {
		return func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, name, errors.New("RBAC "+verb))
		}
	}

	secret := []corev1.LocalObjectReference{{Name: "istio-pull"}}
	cni := cniDS.DeepCopy()
	cni.Spec.Template.Spec.ImagePullSecrets = secret
	objs := cluster(fixture.OldHash, "n1")
	objs[0] = cni
	e := newEnv(t, objs...)
	if err := e.ex.prepull(e.ctx, nr, p, planner.Action{Kind: planner.ActPrepull, Node: "n1"}); err != nil {
		t.Fatal(err)
	}
	for target, image := range map[string]string{"istio-cni-node": "docker.io/istio/install-cni:1.28.1", "ztunnel": "docker.io/istio/ztunnel:1.28.1"} {
		pod, err := e.kube.CoreV1().Pods(istioNS).Get(e.ctx, prepullName("r", "n1", target), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if pod.Spec.NodeName != "n1" || pod.Labels[model.LabelPrepull] != "r" || pod.Labels[model.LabelPrepullTarget] != target || len(pod.OwnerReferences) != 1 || pod.OwnerReferences[0].UID != nr.UID {
			t.Errorf("pod %+v, want bound to n1, labelled with r and %s, owned by r", pod.ObjectMeta, target)
		}
		var images []string
		for _, c := range pod.Spec.Containers {
			images = append(images, c.Image)
			if len(c.Command) != 1 || c.Command[0] != PrepullCommand || c.SecurityContext != nil || len(c.VolumeMounts) != 0 {
				t.Errorf("container %s runs %v (securityContext %v, mounts %v), want %s alone", c.Name, c.Command, c.SecurityContext, c.VolumeMounts, PrepullCommand)
			}
		}
		if !slices.Equal(images, []string{image}) {
			t.Errorf("%s's pod pulls %v, want its new image %s only", target, images, image)
		}
		s := pod.Spec
		if len(s.Tolerations) == 0 || s.RestartPolicy != corev1.RestartPolicyNever || s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken || len(s.Volumes) != 0 || s.ServiceAccountName != "" {
			t.Errorf("pod spec %+v, want a daemon's tolerations, no restarts, no token, no volumes", s)
		}
		if wantSecrets := map[string][]corev1.LocalObjectReference{"istio-cni-node": secret}[target]; !slices.Equal(s.ImagePullSecrets, wantSecrets) {
			t.Errorf("%s's pod pulls with %v, want the template's %v", target, s.ImagePullSecrets, wantSecrets)
		}
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
	for _, target := range []string{"istio-cni-node", "ztunnel"} {
		if _, err := e.kube.CoreV1().Pods(istioNS).Get(e.ctx, prepullName("r", "n1", target), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s's pre-pull pod still there: %v", target, err)
		}
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

// TestPrepullNameIsAValidName: a name past 253 characters is cut, and a
// hash of the whole keeps two targets' pods apart.
func TestPrepullNameIsAValidName(t *testing.T) {
	if got := prepullName("r", "n1", "ztunnel"); got != "nodewise-prepull-r-n1-ztunnel" {
		t.Errorf("name %q", got)
	}
	long := func(target string) string {
		return prepullName(strings.Repeat("r", 200), strings.Repeat("n", 100), target)
	}
	a, b := long("ztunnel"), long("istio-cni-node")
	if len(a) != 253 || len(b) != 253 || a == b {
		t.Errorf("names of %d and %d characters (equal: %v), want 253 and distinct", len(a), len(b), a == b)
	}
	if errs := validation.IsDNS1123Subdomain(a); len(errs) != 0 {
		t.Errorf("%s: %v", a, errs)
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
	var pods []*corev1.Pod
	for _, target := range []string{"istio-cni-node", "ztunnel"} {
		pod, err := e.kube.CoreV1().Pods(istioNS).Get(e.ctx, prepullName("r", "n1", target), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("no pre-pull pod for %s: %v", target, err)
		}
		pods = append(pods, pod)
	}
	if e.ex.claims.Holds("r") || slices.Contains(e.stored("r").Finalizers, model.FinalizerReleaseNodes) {
		t.Error("the node started before its images were pulled")
	}
	if p := e.stored("r").Status.Phase; p != v1alpha1.PhaseProgressing {
		t.Errorf("phase %s, want Progressing", p)
	}
	// The kubelet pulled each image (the containers then fail to start).
	for _, pod := range pods {
		for range pod.Spec.Containers {
			pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "RunContainerError"}}})
		}
		_ = e.pods.Add(pod)
	}
	if err := e.pass("r"); err != nil {
		t.Fatal(err)
	}
	for _, pod := range pods {
		if _, err := e.kube.CoreV1().Pods(istioNS).Get(e.ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("pre-pull pod %s not deleted before the start: %v", pod.Name, err)
		}
	}
	if !slices.Contains(e.stored("r").Finalizers, model.FinalizerReleaseNodes) {
		t.Error("the node did not start once pulled")
	}
}
