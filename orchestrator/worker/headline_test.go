package worker

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/status"
)

// demoReasons are the reasons of the demo's halt on the faulty -rst
// ztunnel build as the judge and its gate gave them: the enrollment that
// passed first, the probe's regression, the probe's line, the baseline's
// source, an agent's clock, istio-cni's checks with their file paths.
var demoReasons = []string{
	"enrolled 1/1 (ambient pods in the mesh at the soak's end)",
	"probe nodewise-probe/nodewise-probe-jqxmx (proxy): resets sent 0/s → 3.1/s, control ×+Inf, p<0.001",
	"probe: 2 pods, 398 connections in the soak; connections 30/s → 26/s, resets received 0/s → 1.4/s, resets sent 0/s → 3.1/s, failed connects 0/s → 0/s, connect latency p50 34µs → 33µs; 1 regressions in 6 tests",
	"baseline of node n1 from its agent's history: 4s of the 5s window read back at the slot's start (5 snapshots), the last 0s sampled live (2 sampled)",
	"agent clock on node node-006 ran up to 0s behind the orchestrator's (tolerance 1s, last measured 0s): 0 of 21 samples placed on the orchestrator's clock, 1 that its own clock would have put in another window (baseline or soak start)",
	"istio-cni on node n1: config ok (/tmp/nwdpaf881b-cni-2487669243/node-007/net.d/10-sim-ptp.conflist: istio-cni chained into the primary config (plugin 2 of 2)); token ok (/tmp/nwdpaf881b-cni-2487669243/node-007/net.d/ZZZ-istio-cni-kubeconfig: the API server accepted the token)",
}

// TestDemoHaltIsOneLine: the demo's halt, worked through the worker, reads
// as one line wherever it lands (the node's reason and verdict, the halt
// reason behind the Halted condition, the events, the HALTED line of
// `nodewise status`): the probe's resets before → after, not the passing
// enrollment, the clock or the paths; every reason stays in the detail.
func TestDemoHaltIsOneLine(t *testing.T) {
	g := &judgeGate{verdict: health.Verdict{Outcome: health.Fail, Headline: "probe: resets sent 0/s → 3.1/s (p<0.001)", Reasons: demoReasons,
		Summary: &v1alpha1.NodeJudgement{Judgements: 1, Regressions: 1, Enrollment: "enrolled 1/1"}}}
	r := newRig(t, g, &fixture.Clock{T: t0, Step: 10 * time.Minute}, nil)
	if err := r.drive(t.Context()); err != nil {
		t.Fatal(err)
	}
	const line = "Fail: probe: resets sent 0/s → 3.1/s (p<0.001)"
	ns, st := r.status.node(node1), r.status.status()
	if ns.Verdict != line || ns.Reason != "gate "+line || st.HaltReason != "node n1: gate "+line || !slices.Equal(ns.Detail, demoReasons) {
		t.Errorf("verdict %q, reason %q, halt reason %q, detail %q: want %q, and every reason in the detail", ns.Verdict, ns.Reason, st.HaltReason, ns.Detail, line)
	}
	for _, e := range r.recorded() {
		if !strings.HasSuffix(e, line) {
			t.Errorf("event %q: want it to end with the headline", e)
		}
	}
	nr := &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: "faulty-1.28.2-rst"}, Status: st}
	var buf bytes.Buffer
	if err := status.RenderStatus(&buf, nr, t0); err != nil {
		t.Fatal(err)
	}
	var halted []string
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, "HALTED") {
			halted = append(halted, l)
		}
		if strings.Contains(l, "enrolled 1/1") || strings.Contains(l, "clock") || strings.Contains(l, "/tmp/") {
			t.Errorf("status line %q names a passing check, a clock or a path", l)
		}
	}
	if len(halted) != 1 || len([]rune(halted[0])) >= 200 || !strings.Contains(halted[0], "node n1: gate "+line) {
		t.Errorf("HALTED lines %q: want one under 200 characters naming the probe's resets before → after on n1", halted)
	}
}
