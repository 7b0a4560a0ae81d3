package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/chart"
	"github.com/nodewise/nodewise/test/testkit"
)

// TestVerbsNameWhoAsks runs the real binary's pause, resume, skip and abort
// as two users (--as) against an API server enforcing deploy/'s admission
// policy nodewise-verb-requester: each verb is admitted, and its annotation
// names the user the API server authenticated. The dashboard's client
// (requesterRollouts) names its user the same way.
func TestVerbsNameWhoAsks(t *testing.T) {
	bin := testkit.Binary(t, "nodewise")
	ctx := context.Background()
	c, rc := requesterCluster(t, false)
	nr, err := rc.Create(ctx, &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: "up"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	failed := c.Nodes[0].Name
	nr.Status = v1alpha1.NodeRolloutStatus{Phase: v1alpha1.PhaseHalted, Nodes: []v1alpha1.NodeStatus{{Name: failed, State: v1alpha1.NodeFailed}}}
	if _, err := rc.UpdateStatus(ctx, nr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	as := func(user string, args ...string) {
		t.Helper()
		full := append([]string{"--kubeconfig=" + c.Kubeconfig, "--as", user, "--as-group", "system:masters"}, args...)
		if out, errOut, err := runIn(bin, "", full...); err != nil {
			t.Fatalf("nodewise %s as %s: %v %q %q", strings.Join(args, " "), user, err, out, errOut)
		}
	}
	names := func(key, user string) {
		t.Helper()
		got, err := rc.Get(ctx, "up", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Annotations[key] != user {
			t.Errorf("%s %q after the verb, want %q", key, got.Annotations[key], user)
		}
	}
	as("alice", "pause", "up")
	names(model.AnnotationPausedBy, "alice")
	as("bob", "resume", "up")
	names(model.AnnotationResumedBy, "bob")
	as("alice", "skip", failed, "--reason", "disk to be replaced")
	names(model.AnnotationNodeRequestBy, "alice")

	// The dashboard's actions go through requesterRollouts.
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "carol", Groups: []string{"system:masters"}}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	carol, err := v1alpha1.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dash := &requesterRollouts{NodeRolloutInterface: carol.NodeRollouts(), kube: kube}
	if _, err := dash.Patch(ctx, "up", types.MergePatchType, []byte(`{"spec":{"rollback":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("the dashboard's rollback as carol: %v", err)
	}
	names(model.AnnotationRolledBackBy, "carol")

	as("bob", "abort", "up")
	names(model.AnnotationAbortedBy, "bob")
}

// requesterCluster starts a two-node cluster with the NodeRollout CRD, Istio
// when asked, and deploy/'s admission policy nodewise-verb-requester in
// force: a pause that names no one, of a rollout made for the probe and
// deleted after it, is refused.
func requesterCluster(t *testing.T, istio bool) (*cluster.Cluster, v1alpha1.NodeRolloutInterface) {
	t.Helper()
	ctx := context.Background()
	c := cluster.Start(t, cluster.Options{Nodes: 2, Zones: 1})
	if err := cluster.InstallCRD(ctx, c.Config, filepath.Join("..", "..", "deploy", "crds", "nodewise.io_noderollouts.yaml")); err != nil {
		t.Fatal(err)
	}
	if istio {
		if err := cluster.InstallIstio(ctx, c.Client, cluster.IstioOptions{Version: "1.27.3", SkipSamples: true}); err != nil {
			t.Fatal(err)
		}
	}
	nwc, err := v1alpha1.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	rc := nwc.NodeRollouts()
	f, err := os.Open(filepath.Join("..", "..", "deploy", "orchestrator", "requester-policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := chart.Decode(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := chart.Apply(ctx, c.Config, objs); err != nil {
		t.Fatal(err)
	}
	const probe = "requester-policy-probe"
	if _, err := rc.Create(ctx, &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: probe}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, time.Minute, "the admission policy to refuse a pause naming no one", func() (bool, error) {
		_, err := rc.Patch(ctx, probe, types.MergePatchType, []byte(`{"spec":{"paused":true}}`), metav1.PatchOptions{})
		if err == nil {
			_, err = rc.Patch(ctx, probe, types.MergePatchType, []byte(`{"spec":{"paused":false}}`), metav1.PatchOptions{})
			return false, err
		}
		return strings.Contains(err.Error(), "nodewise.io/paused-by"), nil
	})
	if err := rc.Delete(ctx, probe, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	return c, rc
}
