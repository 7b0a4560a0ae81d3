package orchestrator

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
)

// TestGateDrainFacts is the table behind GateInput.SwappedInPlace and
// GateInput.ZtunnelGrace.
func TestGateDrainFacts(t *testing.T) {
	cordon := time.Date(2026, 11, 30, 5, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name         string
		policy       v1alpha1.DrainPolicy
		swapsZtunnel bool
		drainedAt    time.Time
		want         bool
	}{
		{"never drains: in place", v1alpha1.DrainNever, true, time.Time{}, true},
		{"never, even with a drain record from an earlier policy", v1alpha1.DrainNever, true, cordon.Add(time.Minute), true},
		{"always, drained after this cordon", v1alpha1.DrainAlways, true, cordon.Add(time.Minute), false},
		{"always, drained at the cordon instant", v1alpha1.DrainAlways, true, cordon, false},
		{"auto, drained", v1alpha1.DrainAuto, true, cordon.Add(time.Second), false},
		{"auto, no drain recorded", v1alpha1.DrainAuto, true, time.Time{}, true},
		{"always, only an earlier attempt's drain", v1alpha1.DrainAlways, true, cordon.Add(-time.Hour), true},
		{"ztunnel not a target: nothing reset as planned", v1alpha1.DrainNever, false, time.Time{}, false},
	} {
		if got := swappedInPlace(tc.policy, tc.swapsZtunnel, tc.drainedAt, cordon); got != tc.want {
			t.Errorf("%s: swappedInPlace = %v, want %v", tc.name, got, tc.want)
		}
	}
	sec := func(n int64) *appsv1.DaemonSet {
		ds := &appsv1.DaemonSet{}
		ds.Spec.Template.Spec.TerminationGracePeriodSeconds = &n
		return ds
	}
	for _, tc := range []struct {
		name string
		ds   *appsv1.DaemonSet
		want time.Duration
	}{
		{"unset: Kubernetes' default", &appsv1.DaemonSet{}, 30 * time.Second},
		{"no DaemonSet", nil, 30 * time.Second},
		{"the chart's value", sec(30), 30 * time.Second},
		{"long grace", sec(300), 5 * time.Minute},
		{"short grace", sec(8), 8 * time.Second},
	} {
		if got := ztunnelGrace(tc.ds); got != tc.want {
			t.Errorf("%s: ztunnelGrace = %s, want %s", tc.name, got, tc.want)
		}
	}
}

// TestJudgementKeepsSummaryJSON: the status copy of health.Summary marshals
// to the same JSON, so `nodewise explain` reads status.nodes[].judgement as a
// health.Summary. Every field is set, so a field added to health.Summary and
// not to v1alpha1.NodeJudgement fails here.
func TestJudgementKeepsSummaryJSON(t *testing.T) {
	sum := &health.Summary{Judgements: 3, ConsecutiveFailures: 2, ConsecutiveQueryErrors: 1, IntervalOutcome: health.Fail,
		BaselineSeconds: 600, SoakSeconds: 300, PodsCompared: 30, PodsNotCompared: 2, Tests: 170, Regressions: 1,
		PlannedResets: 412, JudgedAt: "2026-11-30T05:00:00Z", Rows: []health.SummaryRow{
			{Metric: health.MetricResetsReceived, Before: "6.1/s", After: "8.9/s", P: "p=0.210", Note: "significant but below the ratio/excess floors"},
			{Pod: "shop/cart-7d9", Metric: health.MetricResetsReceived, Before: "0.2/s", After: "3.1/s", P: "p<0.001", Regressed: true},
		}}
	assertAllSet(t, reflect.ValueOf(*sum), "Summary")
	want, _ := json.Marshal(sum)
	got, _ := json.Marshal(judgementOf(sum))
	if string(got) != string(want) {
		t.Fatalf("status judgement JSON differs from health.Summary:\n got %s\nwant %s", got, want)
	}
	var back health.Summary
	if err := json.Unmarshal(got, &back); err != nil || !reflect.DeepEqual(&back, sum) {
		t.Fatalf("round trip: %v\n got %+v\nwant %+v", err, back, *sum)
	}
	if judgementOf(nil) != nil {
		t.Error("a verdict without a summary must clear the judgement")
	}
	many := &health.Summary{Rows: make([]health.SummaryRow, maxJudgementRows+5)}
	if n := len(judgementOf(many).Rows); n != maxJudgementRows {
		t.Errorf("%d rows kept, want the CRD's MaxItems %d", n, maxJudgementRows)
	}
}

// assertAllSet fails when a field of v (or of the first row) is its zero value.
func assertAllSet(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	for i := range v.NumField() {
		f := v.Field(i)
		name := path + "." + v.Type().Field(i).Name
		if f.Kind() == reflect.Slice && f.Len() > 0 {
			for j := range f.Len() {
				row := f.Index(j)
				for k := range row.NumField() {
					if !row.Field(k).IsZero() {
						continue
					}
					set := false
					for m := range f.Len() {
						set = set || !f.Index(m).Field(k).IsZero()
					}
					if !set {
						t.Errorf("test summary leaves %s[].%s unset", name, row.Type().Field(k).Name)
					}
				}
			}
			continue
		}
		if f.IsZero() {
			t.Errorf("test summary leaves %s unset", name)
		}
	}
}
