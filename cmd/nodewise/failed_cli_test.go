package main

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// TestFailedRolloutOnTheCLI: against the simulated cluster's API server, a
// NodeRollout the orchestrator ended Failed (its selector matched no node:
// no halt reason, the reason in the Valid condition) is a finished rollout
// to every verb. list names the reason; status exits 2 with it; retry and
// skip of a node its status still lists are refused as of a finished
// rollout, and a node request without --rollout does not pick it.
func TestFailedRolloutOnTheCLI(t *testing.T) {
	ctx := context.Background()
	c, cli, rc := rolloutCLI(t, 1)
	nr, err := rc.Create(ctx, &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: "nowhere"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const why = "spec.nodeSelector pool=ingres matches no node: check its labels"
	node := c.Nodes[0].Name
	nr.Status = v1alpha1.NodeRolloutStatus{Phase: v1alpha1.PhaseFailed, ObservedGeneration: nr.Generation,
		// An entry a status kept from before (the orchestrator prunes Pending ones).
		Nodes:      []v1alpha1.NodeStatus{{Name: node, State: v1alpha1.NodeFailed}},
		Conditions: []metav1.Condition{{Type: "Valid", Status: metav1.ConditionFalse, Reason: "Invalid", Message: why, LastTransitionTime: metav1.Now()}}}
	if _, err := rc.UpdateStatus(ctx, nr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	if out, errOut, err := cli("list"); err != nil || !strings.Contains(out, "Failed") || !strings.Contains(out, why) {
		t.Errorf("list: %v %s; want the Failed rollout with its reason:\n%s", err, errOut, out)
	}
	out, errOut, err := cli("status", "nowhere", "-o", "name")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitHalted || !strings.Contains(errOut, "NodeRollout nowhere is Failed: "+why) || out != "noderollout.nodewise.io/nowhere\n" {
		t.Errorf("status: %v, stdout %q, stderr %q; want exit %d with the reason", err, out, errOut, exitHalted)
	}
	for _, args := range [][]string{
		{"retry", node, "--rollout", "nowhere"},
		{"skip", node, "--rollout", "nowhere", "--reason", "x"},
	} {
		out, errOut, err := cli(args...)
		oneLineFailure(t, strings.Join(args, " "), out, errOut, err, "NodeRollout nowhere: the rollout is Failed")
	}
	out, errOut, err = cli("retry", node)
	oneLineFailure(t, "retry "+node, out, errOut, err, "is in no unfinished NodeRollout's status")
	if got, _ := rc.Get(ctx, "nowhere", metav1.GetOptions{}); len(got.Annotations) != 0 {
		t.Errorf("a refused request was written: %v", got.Annotations)
	}
}
