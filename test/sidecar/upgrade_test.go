package sidecar

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/revisions/revtag"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/testkit"
)

// TestUpgradePlanFollowed: `nodewise upgrade plan --to 1.28.1` on a 1.27
// cluster orders the upgrade and emits its objects; following it (istiod
// 1-28 installed as a person's Helm change would, the node components
// replaced, the emitted RevisionMigration applied, the default tag moved),
// `nodewise upgrade status` reports each step as the cluster reaches it, up
// to the old revision's removal, the point of no return.
func TestUpgradePlanFollowed(t *testing.T) {
	e := start(t, 3, "1.27.3")
	ctx, cs := e.ctx, e.c.Client
	e.namespace("shop", map[string]string{"istio.io/rev": "default"}, app{name: "web", replicas: 2})
	e.allOn(time.Minute, "1.27.3", 2, "shop")
	bin := testkit.Binary(t, "nodewise")
	kc := "--kubeconfig=" + e.c.Kubeconfig
	status := func(want string) {
		t.Helper()
		out := nodewiseCLI(t, bin, kc, "upgrade", "status", "--to", "1.28.1")
		if first := strings.SplitN(out, "\n", 2)[0]; !strings.Contains(first, want) {
			t.Fatalf("upgrade status:\n%s\nwant its first line to say %q", out, want)
		}
	}

	plan := nodewiseCLI(t, bin, kc, "upgrade", "plan", "--to", "1.28.1")
	t.Logf("nodewise upgrade plan --to 1.28.1:\n%s", plan)
	for _, want := range []string{"upgrade to 1.28.1: step 2 of 6, istiod 1-28 (pass 1): Next",
		"helm upgrade --install istiod-1-28 istio/istiod -n istio-system --version 1.28.1 --set revision=1-28",
		"6. [Later] pass 1: remove 1-27 (by nodewise (then your chart change))  POINT OF NO RETURN"} {
		if !strings.Contains(plan, want) {
			t.Errorf("plan lacks %q", want)
		}
	}
	var rm v1alpha1.RevisionMigration
	docs := strings.Split(nodewiseCLI(t, bin, kc, "upgrade", "plan", "--to", "1.28.1", "-o", "yaml"), "\n---\n")
	if len(docs) != 2 || yaml.UnmarshalStrict([]byte(docs[1]), &rm) != nil || rm.Kind != "RevisionMigration" {
		t.Fatalf("-o yaml: %d documents, want the NodeRollout and the RevisionMigration:\n%s", len(docs), strings.Join(docs, "\n---\n"))
	}

	// Your Helm change: istiod 1-28 beside 1-27, the DaemonSets' templates at 1.28.1.
	if err := cluster.InstallIstio(ctx, cs, cluster.IstioOptions{Version: "1.28.1", InjectorURL: e.inj.URL, CABundle: e.inj.CABundle, SkipSamples: true}); err != nil {
		t.Fatal(err)
	}
	e.inj.SetRevision("1-28", "1.28.1")
	testkit.WaitFor(t, time.Minute, "istiod 1-28 Ready", func() (bool, error) {
		out := nodewiseCLI(t, bin, kc, "upgrade", "status", "--to", "1.28.1")
		return strings.Contains(out, "node components (pass 1): Next"), nil
	})
	// The node components replaced (what the NodeRollout does node by node).
	if err := cs.CoreV1().Pods(cluster.IstioNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "app=ztunnel"}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Pods(cluster.IstioNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "k8s-app=istio-cni-node"}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, time.Minute, "node components on 1.28.1", func() (bool, error) {
		out := nodewiseCLI(t, bin, kc, "upgrade", "status", "--to", "1.28.1")
		return strings.Contains(out, "sidecar namespaces (pass 1): Next"), nil
	})
	// The emitted RevisionMigration, applied.
	e.controller(nil)
	if _, err := e.mc.Create(ctx, &rm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitPhase(rm.Name, 2*time.Minute, v1alpha1.MigrationSucceeded)
	status("default tag (pass 1): Next")
	if err := revtag.Set(ctx, cs, revtag.SetOptions{Tag: "default", Revision: "1-28", Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	status("step 6 of 6, remove 1-27 (pass 1): Next")
}
