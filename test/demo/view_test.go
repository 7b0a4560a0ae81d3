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
