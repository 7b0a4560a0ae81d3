package demo

import (
	"testing"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

func TestBeforeAfterShowsTheNodeTotals(t *testing.T) {
	j := &v1alpha1.NodeJudgement{Rows: []v1alpha1.JudgementRow{
		{Metric: "resets_sent", Before: "0/s", After: "2.5/s"},
		{Pod: "shop/cart", Metric: "resets_sent", Before: "0/s", After: "2.5/s"},
		{Metric: "connect_latency", Before: "p99 1.2ms", After: "p99 1.3ms"},
	}}
	want := "resets_sent 0/s → 2.5/s; connect_latency p99 1.2ms → p99 1.3ms"
	if got := beforeAfter(j); got != want {
		t.Errorf("beforeAfter = %q, want %q", got, want)
	}
	if got := beforeAfter(nil); got != "" {
		t.Errorf("no judgement: %q, want nothing", got)
	}
}

func TestProbeLineOfAHaltReason(t *testing.T) {
	reason := "node node-006: gate Fail: probe nodewise-probe/nodewise-probe-7hsqr: resets received 0/s → 2.4/s, p<0.001; " +
		"probe: 2 pods, 668 connections in the soak; connections 61/s → 54/s, resets received 0/s → 2.4/s; 2 regressions in 6 tests; consecutive failures 2 of 2"
	want := "probe: 2 pods, 668 connections in the soak; connections 61/s → 54/s, resets received 0/s → 2.4/s; 2 regressions in 6 tests"
	if got := probeLineOf(reason); got != want {
		t.Errorf("probeLineOf = %q, want %q", got, want)
	}
	if got := probeLineOf("node node-006: swap timeout"); got != "" {
		t.Errorf("no probe line: %q, want nothing", got)
	}
}
