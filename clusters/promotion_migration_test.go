package clusters

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

func TestPromotedMigrationDecides(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	prom := func(soak time.Duration) v1alpha1.RevisionMigrationSpec {
		return v1alpha1.RevisionMigrationSpec{From: "stable", To: "canary", Gates: &v1alpha1.GatesSpec{Prometheus: &v1alpha1.PrometheusGates{
			Address: "http://prometheus.monitoring.svc:9090", BuiltIn: &v1alpha1.BuiltInGates{Soak: &v1alpha1.Duration{Duration: soak}}}}}
	}
	migration := func(name string, phase v1alpha1.MigrationPhase, ago time.Duration, version string, spec v1alpha1.RevisionMigrationSpec) v1alpha1.RevisionMigration {
		rm := v1alpha1.RevisionMigration{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
		rm.Status.Phase, rm.Status.ToVersion = phase, version
		switch phase {
		case v1alpha1.MigrationSucceeded:
			rm.Status.CompletedAt = &metav1.Time{Time: now.Add(-ago)}
		case v1alpha1.MigrationHalted:
			rm.Status.Reason = "wave tier-1 failed its gate: revision 1-28: 12 xDS rejects (lds) in the wave's soak, 0 on 1-27"
		case v1alpha1.MigrationRefused:
			rm.Status.Reason = "refusing 1-26 -> 1-28: control plane 1.28 would strand legacy/web"
		}
		return rm
	}
	want := WantMigration{ToVersion: "1.28.1", SoakAfter: 24 * time.Hour, Spec: prom(time.Minute)}
	for _, tc := range []struct {
		name     string
		upstream []v1alpha1.RevisionMigration
		want     string // "" promoted, else a part of the reason
	}{
		{"succeeded two days ago", []v1alpha1.RevisionMigration{migration("up", v1alpha1.MigrationSucceeded, 48*time.Hour, "1.28.1", prom(time.Minute))}, ""},
		{"nothing there", nil, "upstream staging: no RevisionMigration has succeeded to istiod version 1.28.1"},
		{"another version only", []v1alpha1.RevisionMigration{migration("old", v1alpha1.MigrationSucceeded, 48*time.Hour, "1.27.3", prom(time.Minute))}, "no RevisionMigration has succeeded"},
		{"no version recorded", []v1alpha1.RevisionMigration{migration("older", v1alpha1.MigrationSucceeded, 48*time.Hour, "", prom(time.Minute))}, "no RevisionMigration has succeeded"},
		{"succeeded an hour ago", []v1alpha1.RevisionMigration{migration("up", v1alpha1.MigrationSucceeded, time.Hour, "1.28.1", prom(time.Minute))},
			"upstream staging: RevisionMigration up succeeded to 1.28.1 60m ago; promotion waits until 2026-12-08T11:00:00Z (soakAfter 24h0m0s)"},
		{"still progressing", []v1alpha1.RevisionMigration{migration("up", v1alpha1.MigrationProgressing, 0, "1.28.1", prom(time.Minute))}, "no RevisionMigration has succeeded"},
		{"aborted after it succeeded", []v1alpha1.RevisionMigration{migration("up", v1alpha1.MigrationAborted, 0, "1.28.1", prom(time.Minute))}, "no RevisionMigration has succeeded"},
		{"halted since", []v1alpha1.RevisionMigration{migration("up", v1alpha1.MigrationSucceeded, 48*time.Hour, "1.28.1", prom(time.Minute)), migration("again", v1alpha1.MigrationHalted, 0, "1.28.1", prom(time.Minute))},
			"upstream staging: RevisionMigration again to 1.28.1 is Halted (wave tier-1 failed its gate: revision 1-28: 12 xDS rejects"},
		{"refused", []v1alpha1.RevisionMigration{migration("up", v1alpha1.MigrationSucceeded, 48*time.Hour, "1.28.1", prom(time.Minute)), migration("skew", v1alpha1.MigrationRefused, 0, "1.28.1", prom(time.Minute))},
			"RevisionMigration skew to 1.28.1 is Refused (refusing 1-26 -> 1-28"},
		{"halted on another version", []v1alpha1.RevisionMigration{migration("up", v1alpha1.MigrationSucceeded, 48*time.Hour, "1.28.1", prom(time.Minute)), migration("other", v1alpha1.MigrationHalted, 0, "1.29.0", prom(time.Minute))}, ""},
		{"gated with a shorter soak", []v1alpha1.RevisionMigration{migration("quick", v1alpha1.MigrationSucceeded, 48*time.Hour, "1.28.1", prom(10*time.Second))},
			"upstream staging: RevisionMigration quick was judged more leniently (builtIn.soak 10s < 1m0s)"},
		{"a lenient one and a strict one", []v1alpha1.RevisionMigration{migration("quick", v1alpha1.MigrationSucceeded, 48*time.Hour, "1.28.1", prom(10*time.Second)), migration("careful", v1alpha1.MigrationSucceeded, 30*time.Hour, "1.28.1", prom(time.Hour))}, ""},
	} {
		got := decideMigration("staging", tc.upstream, want, now)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestStricterMigrationComparesTheGates(t *testing.T) {
	d := func(x time.Duration) *v1alpha1.Duration { return &v1alpha1.Duration{Duration: x} }
	spec := func(p *v1alpha1.PrometheusGates) v1alpha1.RevisionMigrationSpec {
		if p == nil {
			return v1alpha1.RevisionMigrationSpec{}
		}
		return v1alpha1.RevisionMigrationSpec{Gates: &v1alpha1.GatesSpec{Prometheus: p}}
	}
	errorRate := v1alpha1.PrometheusQuery{Name: "error-rate", Query: "x", FailWhen: v1alpha1.FailAbove, Threshold: "0.01"}
	ours := spec(&v1alpha1.PrometheusGates{Address: "http://prom:9090", Queries: []v1alpha1.PrometheusQuery{errorRate}})
	for _, tc := range []struct {
		name     string
		upstream v1alpha1.RevisionMigrationSpec
		want     string
	}{
		{"the same gates", ours, ""},
		{"no gates", spec(nil), "no Prometheus gates"},
		{"built-ins off, query missing", spec(&v1alpha1.PrometheusGates{Address: "http://prom:9090", BuiltIn: &v1alpha1.BuiltInGates{Disabled: true}}),
			"no config-acceptance gate, no retry gate, query error-rate not run"},
		{"retries off, shorter soak, query lets no data pass", spec(&v1alpha1.PrometheusGates{Address: "http://prom:9090", NoData: v1alpha1.NoDataPass,
			BuiltIn: &v1alpha1.BuiltInGates{Soak: d(30 * time.Second), Retries: v1alpha1.RetryGate{Disabled: true}},
			Queries: []v1alpha1.PrometheusQuery{errorRate}}),
			"no retry gate, builtIn.soak 30s < 1m0s, query error-rate noData Pass, ours Inconclusive"},
		{"a shorter baseline", spec(&v1alpha1.PrometheusGates{Address: "http://prom:9090", BuiltIn: &v1alpha1.BuiltInGates{Baseline: d(time.Minute)}, Queries: []v1alpha1.PrometheusQuery{errorRate}}),
			"builtIn.baseline 1m0s < 5m0s"},
		{"stricter: longer soak, no data fails, another query", spec(&v1alpha1.PrometheusGates{Address: "http://other:9090", NoData: v1alpha1.NoDataFail,
			BuiltIn: &v1alpha1.BuiltInGates{Soak: d(time.Hour), Baseline: d(time.Hour)},
			Queries: []v1alpha1.PrometheusQuery{errorRate, {Name: "p99", Query: "y", FailWhen: v1alpha1.FailAbove, Threshold: "0.5"}}}), ""},
	} {
		if got := StricterMigration(tc.upstream, ours); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := StricterMigration(spec(nil), spec(nil)); got != "" {
		t.Errorf("neither gated by Prometheus: %q", got)
	}
}
