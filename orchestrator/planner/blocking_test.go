package planner

import (
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
)

func TestBlockingPods(t *testing.T) {
	p := fixture.Policy(t, func(s *v1alpha1.NodeRolloutSpec) {
		s.Blocking.PodSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"maintenance": "blocks"}}
	})
	pod := func(ns, name, node string, phase corev1.PodPhase, blocks bool) *corev1.Pod {
		l := map[string]string{"app": "x"}
		if blocks {
			l["maintenance"] = "blocks"
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: l}, Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: phase}}
	}
	got := BlockingPods([]*corev1.Pod{
		pod("db", "backup-2", "n1", corev1.PodRunning, true),
		pod("db", "backup-1", "n1", corev1.PodPending, true),
		pod("db", "done", "n2", corev1.PodSucceeded, true),
		pod("web", "other", "n3", corev1.PodRunning, false),
		pod("db", "unbound", "", corev1.PodPending, true),
	}, p.Blocking.Pods)
	if len(got) != 1 || !strings.Contains(got["n1"], "pod db/backup-1") || !strings.Contains(got["n1"], "maintenance=blocks") {
		t.Fatalf("blocking pods %v, want n1 by db/backup-1 only", got)
	}
	if BlockingPods(nil, nil) != nil {
		t.Error("no selector must block nothing")
	}
	if _, err := model.NewPolicy(v1alpha1.NodeRolloutSpec{Blocking: v1alpha1.BlockingSpec{PodSelector: &metav1.LabelSelector{}}}); err == nil || !strings.Contains(err.Error(), "spec.blocking.podSelector") {
		t.Errorf("an empty blocking selector: %v, want refused naming the field", err)
	}
}

// A node with a blocking pod on it does not start (and says why); the
// other nodes of its wave do; once the pod is gone it starts.
func TestPlanBlockedNodeWaits(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	ns := fixture.Fleet(1, 4)
	ns[0].Blocked = "blocked by pod db/backup-1"
	tgts := fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType)
	p := fixture.Policy(t, func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(2), intstr.FromInt32(2)
	})
	d := Plan(model.Snapshot{Nodes: ns, Targets: tgts}, p, now)
	if len(starts(d)) != 0 {
		t.Fatalf("started %v while the first wave's only node is blocked", starts(d))
	}
	if d.Held["zone-a-00"] != "blocked by pod db/backup-1" || !strings.Contains(d.Reason, "zone-a-00 blocked by pod db/backup-1") {
		t.Fatalf("held %v, reason %q: the blocked node does not say why it waits", d.Held, d.Reason)
	}
	ns[0].Blocked = ""
	if d := Plan(model.Snapshot{Nodes: ns, Targets: tgts}, p, now); strings.Join(starts(d), " ") != "zone-a-00" {
		t.Fatalf("unblocked: starts %v, want zone-a-00 (%s)", starts(d), d.Reason)
	}
	// A blocking pod on a node already in flight changes nothing: it finishes.
	fixture.SetState(ns, "zone-a-00", v1alpha1.NodeSwapZtunnel)
	ns[0].Blocked = "blocked by pod db/backup-1"
	d = Plan(model.Snapshot{Nodes: ns, Targets: tgts}, p, now)
	if d.Held["zone-a-00"] != "" {
		t.Errorf("an in-flight node shown as held: %v", d.Held)
	}
}

// Firing blocking alerts, or alerts that cannot be read, hold every start;
// a node in flight still finishes.
func TestPlanAlertsBlockEveryStart(t *testing.T) {
	now := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	p := fixture.Policy(t, func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(2), intstr.FromInt32(2)
		s.Blocking.PrometheusAddress = "http://prometheus.monitoring.svc:9090"
		s.Blocking.Alerts = []v1alpha1.BlockingAlert{{Name: "NodeDown"}, {Name: "Freeze", Labels: map[string]string{"team": "sre"}}}
	})
	cases := []struct {
		name   string
		firing []FiringAlert
		err    error
		want   string // "" no block
	}{
		{"nothing firing", nil, nil, ""},
		{"another alert", []FiringAlert{{"alertname": "Watchdog"}}, nil, ""},
		{"matcher label differs", []FiringAlert{{"alertname": "Freeze", "team": "web"}}, nil, ""},
		{"by name", []FiringAlert{{"alertname": "NodeDown", "instance": "n1"}}, nil, `NodeDown{instance="n1"}`},
		{"by name and label", []FiringAlert{{"alertname": "Freeze", "team": "sre", "severity": "page"}}, nil, `Freeze{severity="page",team="sre"}`},
		{"unreachable", nil, errors.New("connection refused"), "cannot be read from http://prometheus.monitoring.svc:9090, so they hold every start (fail closed): connection refused"},
	}
	for _, tc := range cases {
		why := AlertsBlock(p.Blocking, tc.firing, tc.err)
		if (tc.want == "") != (why == "") || !strings.Contains(why, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, why, tc.want)
		}
		ns := fixture.Fleet(1, 4)
		fixture.SetState(ns, "zone-a-00", v1alpha1.NodeSoak)
		d := Plan(model.Snapshot{Nodes: ns, Targets: fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType), AlertsBlock: why}, p, now)
		if tc.want != "" && (len(starts(d)) != 0 || !strings.Contains(d.Reason, "no node starts: ") || !strings.Contains(d.Reason, tc.want)) {
			t.Errorf("%s: starts %v, reason %q; want none, naming why", tc.name, starts(d), d.Reason)
		}
		if tc.want == "" && strings.Contains(d.Reason, "no node starts") {
			t.Errorf("%s: held (%s)", tc.name, d.Reason)
		}
		resumed := false
		for _, a := range d.Actions {
			resumed = resumed || (a.Kind == ActResume && a.Node == "zone-a-00")
		}
		if !resumed {
			t.Errorf("%s: the in-flight node is not driven on", tc.name)
		}
	}
	if AlertsBlock(model.Blocking{}, nil, errors.New("down")) != "" {
		t.Error("without blocking alerts, an unreachable Prometheus must block nothing")
	}
	if _, err := model.NewPolicy(v1alpha1.NodeRolloutSpec{Blocking: v1alpha1.BlockingSpec{Alerts: []v1alpha1.BlockingAlert{{Name: "X"}}}}); err == nil || !strings.Contains(err.Error(), "spec.blocking.prometheusAddress") {
		t.Errorf("alerts without an address: %v, want refused naming the field", err)
	}
}
