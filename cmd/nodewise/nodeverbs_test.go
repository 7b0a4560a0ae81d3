package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/testkit"
)

// TestNodeVerbsOnTheSimCluster runs the real binary's retry and skip against
// the simulated cluster's API server, the test playing the orchestrator (it
// writes the status and the acknowledgement). What the status shows unsafe
// is refused in one line with nothing written; an accepted request is the
// annotation the orchestrator acts on, naming who asked.
func TestNodeVerbsOnTheSimCluster(t *testing.T) {
	ctx := context.Background()
	c, cli, rc := rolloutCLI(t, 3)
	bad := func(want string, args ...string) {
		t.Helper()
		out, errOut, err := cli(args...)
		oneLineFailure(t, strings.Join(args, " "), out, errOut, err, want)
	}
	nr, err := rc.Create(ctx, &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: "up"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inFlight, failed, pending := c.Nodes[0].Name, c.Nodes[1].Name, c.Nodes[2].Name
	nr.Status = v1alpha1.NodeRolloutStatus{Phase: v1alpha1.PhaseHalted, Nodes: []v1alpha1.NodeStatus{
		{Name: inFlight, State: v1alpha1.NodeCordon}, {Name: failed, State: v1alpha1.NodeFailed}, {Name: pending, State: v1alpha1.NodePending},
	}}
	if _, err := rc.UpdateStatus(ctx, nr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	bad("--reason is required", "skip", pending, "--reason", " ")
	bad("it is in flight (Cordon)", "skip", inFlight, "--reason", "x")
	bad("it is in flight (Cordon)", "retry", inFlight)
	bad("only a failed node is retried", "retry", pending)
	bad("node node-999 is in no unfinished NodeRollout's status", "retry", "node-999")
	bad("no such node in its status", "retry", "node-999", "--rollout", "up")
	bad(`"nope" not found`, "retry", failed, "--rollout", "nope")
	if got, _ := rc.Get(ctx, "up", metav1.GetOptions{}); got.Annotations[model.AnnotationNodeRequest] != "" {
		t.Fatalf("a refused request was written: %q", got.Annotations[model.AnnotationNodeRequest])
	}

	out, errOut, err := cli("skip", pending, "--reason", "disk to be replaced")
	if err != nil || out != "noderollout.nodewise.io/up skip requested\n" {
		t.Fatalf("skip: %v %q %q", err, out, errOut)
	}
	got, err := rc.Get(ctx, "up", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, ok, err := model.PendingNodeRequest(got.Annotations)
	if err != nil || !ok || r.Verb != model.VerbSkip || r.Node != pending || r.Reason != "disk to be replaced" || r.By == "" {
		t.Fatalf("request %+v pending %v (%v): want the skip of %s with its reason and who asked", r, ok, err, pending)
	}
	// One request at a time: the next waits for the orchestrator.
	bad("is not acted on yet", "retry", failed)
	got.Annotations[model.AnnotationAckedNodeRequest] = r.Token
	if _, err := rc.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, errOut, err := cli("retry", failed, "-o", "name"); err != nil || out != "noderollout.nodewise.io/up\n" {
		t.Fatalf("retry -o name: %v %q %q", err, out, errOut)
	}
	got, _ = rc.Get(ctx, "up", metav1.GetOptions{})
	if r, ok, _ := model.PendingNodeRequest(got.Annotations); !ok || r.Verb != model.VerbRetry || r.Node != failed {
		t.Fatalf("request %+v pending %v: want the retry of %s", r, ok, failed)
	}
}

// rolloutCLI starts a simulated cluster of nodes nodes with the NodeRollout
// CRD and gives the nodewise binary run against it, and a client.
func rolloutCLI(t *testing.T, nodes int) (*cluster.Cluster, func(args ...string) (string, string, error), v1alpha1.NodeRolloutInterface) {
	t.Helper()
	bin := testkit.Binary(t, "nodewise")
	c := cluster.Start(t, cluster.Options{Nodes: nodes, Zones: 1})
	kc := "--kubeconfig=" + c.Kubeconfig
	cli := func(args ...string) (string, string, error) { return runIn(bin, "", append([]string{kc}, args...)...) }
	if err := cluster.InstallCRD(context.Background(), c.Config, filepath.Join("..", "..", "deploy", "crds", "nodewise.io_noderollouts.yaml")); err != nil {
		t.Fatal(err)
	}
	nwc, err := v1alpha1.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	return c, cli, nwc.NodeRollouts()
}
