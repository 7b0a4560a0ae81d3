package locks

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestKuredAndSUCHolders(t *testing.T) {
	ds := func(name, lock string) *appsv1.DaemonSet {
		return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: name, Annotations: map[string]string{AnnotationKured: lock}}}
	}
	now := time.Date(2026, 12, 1, 0, 10, 0, 0, time.UTC)
	held, bad := KuredHolders([]*appsv1.DaemonSet{
		ds("kured", `{"nodeID":"n1","metadata":{"unschedulable":false},"created":"2026-12-01T00:00:00Z","TTL":0}`),
		ds("kured-multi", `{"maxOwners":3,"locks":[{"nodeID":"n2"},{"nodeID":"n3","created":"2026-12-01T00:05:00Z","TTL":600000000000},`+
			`{"nodeID":"n6","created":"2026-12-01T00:00:00Z","TTL":600000000000}]}`),
		// --lock-ttl=5m, taken 10 minutes ago: Kured would take it over.
		ds("kured-expired", `{"nodeID":"n7","metadata":{"unschedulable":false},"created":"2026-12-01T00:00:00Z","TTL":300000000000}`),
		ds("released", ""),
		ds("broken", `not json`),
	}, now)
	for _, n := range []string{"n1", "n2", "n3"} {
		if !strings.Contains(held[n], "Kured's lock") {
			t.Errorf("%s: %q, want held by Kured", n, held[n])
		}
	}
	if len(held) != 3 || len(bad) != 1 || !strings.Contains(bad[0], "kube-system/broken") {
		t.Fatalf("held %v (want n1, n2, n3: n6's and n7's locks expired at %s), unreadable %v", held, now, bad)
	}
	pod := func(node string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "system-upgrade", Name: "apply-" + node, Labels: map[string]string{LabelSUCPlan: "os", LabelSUCNode: node}}, Status: corev1.PodStatus{Phase: phase}}
	}
	suc := SUCHolders([]*corev1.Pod{pod("n4", corev1.PodRunning), pod("n5", corev1.PodSucceeded)})
	if len(suc) != 1 || !strings.Contains(suc["n4"], "plan os") {
		t.Fatalf("SUC holders %v, want n4 only", suc)
	}
}
