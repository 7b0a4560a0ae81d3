package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodewise/nodewise/health/wire"
)

// answering is an agent client whose agents answer except on down nodes.
type answering struct{ down map[string]bool }

func (a answering) Snapshot(_ context.Context, node string) (wire.Snapshot, error) {
	if a.down[node] {
		return wire.Snapshot{}, errors.New("dial tcp 10.0.0.2:9443: connection refused")
	}
	return wire.Snapshot{Node: node, AgentVersion: "v0.2.0", Mode: "ebpf"}, nil
}

func agentPod(name, node string, ready bool) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "nodewise-system", Labels: map[string]string{"app.kubernetes.io/name": "nodewise-agent"}},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
}

// TestCheckAgents: the helm test passes only when every agent pod is Ready
// and its agent answers; no agent at all is a failure too.
func TestCheckAgents(t *testing.T) {
	for _, tc := range []struct {
		name string
		pods []*corev1.Pod
		down map[string]bool
		want string // "" passes
	}{
		{"all answer", []*corev1.Pod{agentPod("a1", "n1", true), agentPod("a2", "n2", true)}, nil, ""},
		{"no agents", nil, nil, "no node agent pods"},
		{"one not ready", []*corev1.Pod{agentPod("a1", "n1", true), agentPod("a2", "n2", false)}, nil, `nodewise-system/a2 on node "n2" is not Ready`},
		{"one unreachable", []*corev1.Pod{agentPod("a1", "n1", true), agentPod("a2", "n2", true)}, map[string]bool{"n2": true}, "node n2: dial tcp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := fake.NewClientset()
			for _, p := range tc.pods {
				if _, err := kube.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			var out bytes.Buffer
			err := checkAgents(context.Background(), kube, answering{down: tc.down}, "nodewise-system", &out)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("failed: %v", err)
			case tc.want == "" && !strings.Contains(out.String(), "all 2 node agents answer"):
				t.Fatalf("output %q", out.String())
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}
