package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodewise/nodewise/test/promrig"
	"github.com/nodewise/nodewise/test/testkit"
)

// TestPlanApplyRejectBadGates: plan and apply refuse malformed spec.gates with
// one line and a non-zero exit before touching a cluster. A malformed PromQL
// query is rejected by a real Prometheus (bin/prometheus, built by
// `hack/build-tool.sh prometheus`); plan --offline checks thresholds but sends
// no query.
func TestPlanApplyRejectBadGates(t *testing.T) {
	bin := testkit.Binary(t, "nodewise")
	prom := startPrometheus(t)
	dir := t.TempDir()
	file := func(name, gates string) string {
		p := filepath.Join(dir, name+".yaml")
		doc := "apiVersion: nodewise.io/v1alpha1\nkind: NodeRollout\nmetadata: {name: r}\nspec:\n  gates:\n" + gates + "\n"
		if err := os.WriteFile(p, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	query := func(q, threshold string) string {
		return `    prometheus: {address: "http://` + prom + `", timeout: 5s, queries: [{name: q1, query: "` + q + `", failWhen: Below, threshold: "` + threshold + `"}]}`
	}
	badQuery := file("bad-query", query("sum(rate(x[5m])", "0.99"))
	badThreshold := file("bad-threshold", query("up", "ninety"))
	dupMetric := file("dup-metric", "    counts: [{metric: retransmits}, {metric: retransmits, minRatio: \"3\"}]")
	// No cluster: a kubeconfig that points nowhere. Gate errors come first,
	// so nothing is read or written.
	noCluster := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(noCluster, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\nusers: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := file("good", query("up", "0.99"))
	// The rig's Prometheus is on loopback, which only an explicit
	// --gate-address-allow lets a gate query (as on the orchestrator).
	allow := []string{"--gate-address-allow", "127.0.0.1"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"plan", "-f", good}, `gates.prometheus.address "http://` + prom + `": gate address not allowed: host "127.0.0.1" is neither a cluster Service`},
		{[]string{"plan", "--offline", "-f", good}, `pass the same --gate-address-allow here`},
		{[]string{"apply", "-f", good, "--gate-address-allow", "prom.example.com"}, `nor one of the hosts of --gate-address-allow: prom.example.com`},
		{[]string{"plan", "-f", good, "--gate-address-allow", "http://127.0.0.1"}, `host pattern "http://127.0.0.1"`},
		{append([]string{"apply", "-f", badQuery}, allow...), `gates.prometheus.queries[q1] "sum(rate(x[5m])": malformed PromQL query`},
		{append([]string{"plan", "-f", badQuery}, allow...), `malformed PromQL query`},
		{append([]string{"plan", "--offline", "-f", badThreshold}, allow...), `gates.prometheus.queries[q1].threshold "ninety": must be a decimal number`},
		{append([]string{"apply", "-f", badThreshold}, allow...), `threshold "ninety"`},
		{[]string{"plan", "--offline", "-f", dupMetric}, `gates.counts: metric "retransmits" listed twice`},
		{[]string{"apply", "-f", dupMetric}, `listed twice`},
	} {
		out, errOut, err := run(bin, append(tc.args, "--kubeconfig", noCluster)...)
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		if err == nil || len(lines) != 1 || !strings.Contains(errOut, tc.want) || out != "" {
			t.Errorf("%v: exit %v, stdout %q, stderr %q; want one stderr line with %q and a non-zero exit", tc.args, err, out, errOut, tc.want)
		}
	}
	// Offline sends no query: the malformed one passes, and plan says what it checked.
	if out, errOut, err := run(bin, "plan", "--offline", "-f", badQuery, "--gate-address-allow", "127.0.0.1"); err != nil || !strings.Contains(out, "valid NodeRollout r") {
		t.Errorf("plan --offline with a query only the server can check: %v %q %q", err, out, errOut)
	}
	// A well-formed query passes the gate check and reaches the cluster step.
	if _, errOut, err := run(bin, "plan", "-f", good, "--kubeconfig", noCluster, "--gate-address-allow", "127.0.0.1"); err == nil || strings.Contains(errOut, "gates.") {
		t.Errorf("plan with good gates and no cluster: %v %q; want a cluster error, not a gate error", err, errOut)
	}
}

// startPrometheus runs bin/prometheus on loopback with an empty scrape config
// and returns its address; the test kills it (the PID it started) at cleanup.
func startPrometheus(t *testing.T) string {
	t.Helper()
	return strings.TrimPrefix(promrig.Start(t).URL, "http://")
}
