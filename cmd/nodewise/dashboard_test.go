package main

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/browser"
	"github.com/nodewise/nodewise/test/testkit"
)

// TestDashboardCommandOnTheSimCluster runs the built `nodewise dashboard`
// against the simulated cluster's API server: it prints its address, its
// rollout page names a halted rollout's node (the status an orchestrator
// writes, set by the test), `chromium --headless --dump-dom` of that
// address names it too, and SIGTERM stops it cleanly (testkit.Serve).
func TestDashboardCommandOnTheSimCluster(t *testing.T) {
	bin := testkit.Binary(t, "nodewise")
	ctx := context.Background()
	c := cluster.Start(t, cluster.Options{Nodes: 1, Zones: 1})
	node := c.Nodes[0].Name
	for _, crd := range []string{"nodewise.io_noderollouts.yaml", "nodewise.io_revisionmigrations.yaml"} {
		if err := cluster.InstallCRD(ctx, c.Config, filepath.Join("..", "..", "deploy", "crds", crd)); err != nil {
			t.Fatal(err)
		}
	}
	if err := cluster.InstallIstio(ctx, c.Client, cluster.IstioOptions{Version: "1.27.3", SkipSamples: true}); err != nil {
		t.Fatal(err)
	}
	if out, errOut, err := runIn(bin, strings.Replace(goodRollout, "node-1", node, 1), "--kubeconfig="+c.Kubeconfig, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply: %v %q %q", err, out, errOut)
	}
	nwc, err := v1alpha1.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	setPhase(t, nwc.NodeRollouts(), "up", v1alpha1.PhaseHalted, "node "+node+" failed: resets received 0 → 41", node, v1alpha1.NodeFailed)

	base := testkit.Serve(t, bin, "--kubeconfig="+c.Kubeconfig, "dashboard", "--address=127.0.0.1:0")
	if !strings.HasPrefix(base, "http://127.0.0.1:") {
		t.Fatalf("nodewise dashboard serves on %s, want the loopback address it was given", base)
	}
	url := base + "/rollouts/up"

	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := `class="halted-node">` + node + `<`
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), want) {
		t.Errorf("GET %s: %s, %d bytes; want 200 naming the halted node %s", url, resp.Status, len(page), node)
	}
	dom, err := browser.DumpDOM(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dom, want) {
		t.Errorf("chromium --dump-dom %s does not name the halted node %s", url, node)
	}
}
