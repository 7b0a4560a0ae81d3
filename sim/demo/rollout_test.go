package demo

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/testkit"
)

// TestRunRolloutFollowsAWatch: against the real API server, with no
// orchestrator, runRollout returns the rollout as soon as its status turns
// terminal, and a rollout deleted while followed is an error at once (a
// poll of Get took the NotFound for a busy server and waited its 15 min).
func TestRunRolloutFollowsAWatch(t *testing.T) {
	t.Parallel()
	c := cluster.Start(t, cluster.Options{Nodes: 1})
	ctx := context.Background()
	if err := cluster.InstallCRD(ctx, c.Config, testkit.CRD("nodewise.io_noderollouts.yaml")); err != nil {
		t.Fatal(err)
	}
	nwc, err := v1alpha1.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	rc := nwc.NodeRollouts()
	follow := func(name string, want v1alpha1.RolloutPhase) <-chan error {
		done := make(chan error, 1)
		go func() {
			got, err := runRollout(ctx, rc, healthyRollout(name, c.Nodes[0].Name), newView(testWriter{t}, false))
			if err == nil && got.Status.Phase != want {
				t.Errorf("%s: returned in phase %q, want %s", name, got.Status.Phase, want)
			}
			done <- err
		}()
		testkit.WaitFor(t, 30*time.Second, name+" to be created", func() (bool, error) {
			_, err := rc.Get(ctx, name, metav1.GetOptions{})
			return err == nil, nil
		})
		return done
	}
	wait := func(name string, done <-chan error) error {
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: runRollout still waiting 30 s after the change", name)
			return nil
		}
	}

	halted := follow("halts", v1alpha1.PhaseHalted)
	nr, err := rc.Get(ctx, "halts", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nr.Status.Phase, nr.Status.HaltReason = v1alpha1.PhaseHalted, "node-001 failed its gate"
	if _, err := rc.UpdateStatus(ctx, nr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait("halts", halted); err != nil {
		t.Errorf("halted rollout: %v", err)
	}

	// Failed (its selector matched no node) is terminal too.
	failed := follow("fails", v1alpha1.PhaseFailed)
	nr, err = rc.Get(ctx, "fails", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nr.Status.Phase = v1alpha1.PhaseFailed
	nr.Status.Conditions = []metav1.Condition{{Type: "Valid", Status: metav1.ConditionFalse, Reason: "Invalid",
		Message: "spec.nodeSelector pool=ingres matches no node", LastTransitionTime: metav1.Now()}}
	if _, err := rc.UpdateStatus(ctx, nr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait("fails", failed); err != nil {
		t.Errorf("failed rollout: %v", err)
	}

	deleted := follow("deleted", "")
	if err := rc.Delete(ctx, "deleted", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait("deleted", deleted); err == nil || !strings.Contains(err.Error(), "was deleted") {
		t.Errorf("deleted rollout: %v, want an error saying it was deleted", err)
	}

	// Deleted before runRollout's watch first lists it: no Deleted event
	// comes, and the list alone must end the wait.
	early := make(chan error, 1)
	go func() {
		_, err := runRollout(ctx, deleteOnCreate{rc}, healthyRollout("early", c.Nodes[0].Name), newView(testWriter{t}, false))
		early <- err
	}()
	if err := wait("early", early); err == nil || !strings.Contains(err.Error(), "was deleted") {
		t.Errorf("rollout deleted before the watch: %v, want an error saying it was deleted", err)
	}
}

// deleteOnCreate deletes each NodeRollout right after creating it.
type deleteOnCreate struct{ v1alpha1.NodeRolloutInterface }

func (d deleteOnCreate) Create(ctx context.Context, nr *v1alpha1.NodeRollout, opts metav1.CreateOptions) (*v1alpha1.NodeRollout, error) {
	got, err := d.NodeRolloutInterface.Create(ctx, nr, opts)
	if err == nil {
		err = d.Delete(ctx, nr.Name, metav1.DeleteOptions{})
	}
	return got, err
}
