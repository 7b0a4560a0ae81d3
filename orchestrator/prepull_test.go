package orchestrator

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
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

// With prepull, a node starts only once its images are pulled; a failed pull
// halts with nothing started.
func TestPlanPrepullsBeforeTheStart(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	tgts := targets(appsv1.OnDeleteDaemonSetStrategyType)
	p := policy(t, func(s *v1alpha1.NodeRolloutSpec) { s.MaxParallel, s.MaxUnavailable, s.Prepull = 1, 1, true })
	ns := fleet(1, 3)
	d := Plan(model.Snapshot{Nodes: ns, Targets: tgts}, p, now)
	if len(d.Actions) != 1 || d.Actions[0].Kind != ActPrepull || d.Actions[0].Node != "zone-a-00" {
		t.Fatalf("actions %v, want a pre-pull of zone-a-00 only", d.Actions)
	}
	ns[0].Prepull = model.PrepullView{Exists: true}
	if d := Plan(model.Snapshot{Nodes: ns, Targets: tgts}, p, now); len(d.Actions) != 0 {
		t.Fatalf("pulling: actions %v, want none (the slot is taken)", d.Actions)
	}
	ns[0].Prepull = model.PrepullView{Exists: true, Pulled: true}
	d = Plan(model.Snapshot{Nodes: ns, Targets: tgts}, p, now)
	if len(d.Actions) != 2 || d.Actions[0].Kind != ActPrepullDone || d.Actions[1].Kind != ActStart {
		t.Fatalf("pulled: actions %v, want the pod deleted then the start", d.Actions)
	}
	ns[0].Prepull = model.PrepullView{Exists: true, Failed: "pre-pull of image x on node zone-a-00 failed: ErrImagePull: m"}
	d = Plan(model.Snapshot{Nodes: ns, Targets: tgts}, p, now)
	if d.Phase != v1alpha1.PhaseHalted || !strings.Contains(d.Reason, "image x on node zone-a-00") || len(starts(d)) != 0 {
		t.Fatalf("failed pull: phase %s reason %q starts %v", d.Phase, d.Reason, starts(d))
	}
}
