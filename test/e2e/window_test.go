package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// closedWindowJSON is a window that is closed now (it opens in two hours, UTC).
func closedWindowJSON(now time.Time) string {
	start := now.UTC().Add(2 * time.Hour)
	if start.Hour() >= 22 || start.Hour() < 2 { // keep start < end on the same day
		start = time.Date(0, 1, 1, 3, 0, 0, 0, time.UTC)
		if now.UTC().Hour() == 3 {
			start = start.Add(3 * time.Hour)
		}
	}
	return fmt.Sprintf(`[{"start":"%02d:00","end":"%02d:59","timeZone":"UTC"}]`, start.Hour(), start.Hour())
}

// TestMaintenanceWindows: outside a window no node starts; a node already in
// flight when the window closes finishes; when a window opens, the rollout goes on.
func TestMaintenanceWindows(t *testing.T) {
	const nodes = 4
	e := newEnv(t, nodes, 2)
	e.upgrade("1.28.1")
	e.runInProcess("solo")
	e.apply(rollout("windows", func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
		s.Soak = &v1alpha1.Duration{Duration: 4 * time.Second}
	}))
	inFlight := e.waitStep("windows", v1alpha1.NodeSoak)
	e.patch("windows", `{"spec":{"maintenanceWindows":`+closedWindowJSON(time.Now())+`}}`)
	nr := e.waitPhase("windows", time.Minute, v1alpha1.PhaseWaitingForWindow)
	time.Sleep(3 * time.Second) // a broken orchestrator would start a node now
	nr, err := e.rollouts.Get(context.Background(), "windows", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nr.Status.Nodes {
		switch {
		case n.Name == inFlight && n.State != v1alpha1.NodeDone:
			t.Errorf("in-flight node %s is %s, want it to finish (Done) after the window closed", n.Name, n.State)
		case n.Name != inFlight && n.State != v1alpha1.NodePending:
			t.Errorf("node %s is %s outside the window, want Pending", n.Name, n.State)
		}
	}
	if nr.Status.Phase != v1alpha1.PhaseWaitingForWindow {
		t.Errorf("phase %s, want WaitingForWindow", nr.Status.Phase)
	}
	open := fmt.Sprintf(`[{"start":"00:00","end":"24:00","timeZone":"Pacific/Auckland"}]`)
	e.patch("windows", `{"spec":{"maintenanceWindows":`+open+`}}`)
	nr = e.waitPhase("windows", 3*time.Minute, v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted)
	if nr.Status.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("phase %s: %s", nr.Status.Phase, nr.Status.HaltReason)
	}
	e.assertAllOnNewest(nodes)
}
