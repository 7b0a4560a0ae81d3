package podage

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio/freshness"
)

var now = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC) // a Monday

func mustParse(t *testing.T, s v1alpha1.PodAgePolicySpec) policy {
	t.Helper()
	if s.RateLimit.PodsPerSecond == 0 {
		s.RateLimit.PodsPerSecond = 1
	}
	if s.MaxAge == nil {
		s.MaxAge = &v1alpha1.Duration{Duration: 720 * time.Hour}
	}
	p, err := parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOpenReadsWindowsAndBlackouts(t *testing.T) {
	win := []v1alpha1.MaintenanceWindow{{Start: "22:00", End: "04:00", TimeZone: "UTC"}}
	for _, tc := range []struct {
		name      string
		spec      v1alpha1.PodAgePolicySpec
		at        time.Time
		open      bool
		next      time.Time
		neverOpen bool
	}{
		{name: "no windows: any time", at: now, open: true, next: now},
		{name: "outside the night window", spec: v1alpha1.PodAgePolicySpec{MaintenanceWindows: win}, at: now, next: time.Date(2026, 12, 7, 22, 0, 0, 0, time.UTC)},
		{name: "inside it", spec: v1alpha1.PodAgePolicySpec{MaintenanceWindows: win}, at: now.Add(11 * time.Hour), open: true, next: now.Add(11 * time.Hour)},
		{name: "inside it but blacked out: open after the blackout", at: now.Add(11 * time.Hour), next: time.Date(2026, 12, 8, 1, 0, 0, 0, time.UTC),
			spec: v1alpha1.PodAgePolicySpec{MaintenanceWindows: win, Blackouts: []v1alpha1.Blackout{{Start: "2026-12-07T20:00", End: "2026-12-08T01:00"}}}},
		{name: "a blackout over the whole window: the next night", at: now, next: time.Date(2026, 12, 8, 22, 0, 0, 0, time.UTC),
			spec: v1alpha1.PodAgePolicySpec{MaintenanceWindows: win, Blackouts: []v1alpha1.Blackout{{Start: "2026-12-07T21:00", End: "2026-12-08T05:00"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			open, next := mustParse(t, tc.spec).open(tc.at)
			if open != tc.open || !next.Equal(tc.next) {
				t.Errorf("open(%s) = %v, %s; want %v, %s", tc.at, open, next, tc.open, tc.next)
			}
		})
	}
}

func cand(name string, optOut *metav1.Time) candidate {
	return candidate{namespace: "shop", kind: "Deployment", name: name, team: "payments", why: "old", pods: 1, optOut: optOut}
}

func rec(name string, s v1alpha1.PodAgeWorkloadState, wave int32, noticed bool) v1alpha1.PodAgeWorkload {
	r := v1alpha1.PodAgeWorkload{Namespace: "shop", Kind: "Deployment", Name: name, State: s, Wave: wave}
	if noticed {
		t := metav1.NewTime(now.Add(-time.Hour))
		r.NoticeSentAt = &t
	}
	return r
}

func TestMergeKeepsOneRecordPerWorkloadAndNoticesFirst(t *testing.T) {
	ahead := metav1.NewTime(now.Add(time.Hour))
	records := []v1alpha1.PodAgeWorkload{
		rec("noticed", v1alpha1.WorkloadNoticed, 0, true),
		rec("fixed", v1alpha1.WorkloadNoticed, 0, true),        // restarted by its owners: no longer a candidate
		rec("inflight", v1alpha1.WorkloadRestarting, 3, true),  // the wave in flight
		rec("lastwave", v1alpha1.WorkloadRestarted, 3, true),   // the last wave's record
		rec("oldwave", v1alpha1.WorkloadRestarted, 1, true),    // aged past the target again since
		rec("expired", v1alpha1.WorkloadOptedOut, 0, true),     // its opt-out has passed
		rec("optedearly", v1alpha1.WorkloadOptedOut, 0, false), // opted out before any notice, now expired
	}
	cands := []candidate{cand("noticed", nil), cand("oldwave", nil), cand("expired", nil), cand("optedearly", nil), cand("new", nil), cand("protected", &ahead)}
	out, notice := merge(records, cands, 3)
	got := map[string]v1alpha1.PodAgeWorkloadState{}
	for _, r := range out {
		got[r.Name] = r.State
	}
	want := map[string]v1alpha1.PodAgeWorkloadState{
		"noticed": v1alpha1.WorkloadNoticed, "inflight": v1alpha1.WorkloadRestarting, "lastwave": v1alpha1.WorkloadRestarted,
		"expired": v1alpha1.WorkloadNoticed, "protected": v1alpha1.WorkloadOptedOut,
	}
	if len(got) != len(want) {
		t.Errorf("records %v, want %v", got, want)
	}
	for n, s := range want {
		if got[n] != s {
			t.Errorf("%s is %q, want %q", n, got[n], s)
		}
	}
	var names []string
	for _, c := range notice {
		names = append(names, c.name)
	}
	if strings.Join(names, " ") != "oldwave optedearly new" {
		t.Errorf("to notice: %v, want oldwave optedearly new", names)
	}
}

func TestEligibleOnlyOnceTheNoticeHasRunOut(t *testing.T) {
	records := []v1alpha1.PodAgeWorkload{
		rec("due", v1alpha1.WorkloadNoticed, 0, true),
		rec("blocked", v1alpha1.WorkloadBlocked, 0, true),
		rec("optout", v1alpha1.WorkloadOptedOut, 0, true),
		rec("restarted", v1alpha1.WorkloadRestarted, 1, true),
		rec("unnoticed", v1alpha1.WorkloadNoticed, 0, false),
	}
	if got := eligible(records, time.Hour, now); len(got) != 2 || got[0] != 0 || got[1] != 1 {
		t.Errorf("eligible after the notice = %v, want [0 1]", got)
	}
	if got := eligible(records, 2*time.Hour, now); len(got) != 0 {
		t.Errorf("eligible before the notice ran out = %v, want none", got)
	}
}

func TestCandidatesMissTheTarget(t *testing.T) {
	old := metav1.NewTime(now.Add(-40 * 24 * time.Hour))
	r := freshness.Report{Now: metav1.NewTime(now), Version: "1.28.1", Workloads: []freshness.Workload{
		{Namespace: "shop", Kind: "Deployment", Name: "old", Pods: 2, OverAge: 1, OldestPod: &old},
		{Namespace: "shop", Kind: "Deployment", Name: "behind", Pods: 1, Lagging: 1, OldestVersion: "1.26.2", MinorsBehind: 2, OldestPod: &old},
		{Namespace: "search", Kind: "StatefulSet", Name: "pinned", Pods: 1, Lagging: 1, Pinned: "its namespace is on revision 1-26", OldestPod: &old},
		{Namespace: "other", Kind: "Deployment", Name: "uncovered", Pods: 1, OverAge: 1, OldestPod: &old},
		{Namespace: "shop", Kind: "Deployment", Name: "fresh", Pods: 1, OldestPod: &old},
	}}
	p := mustParse(t, v1alpha1.PodAgePolicySpec{MaxMinorsBehind: new(int32(1))})
	var got []string
	for _, c := range candidates(r, p, func(ns string) bool { return ns != "other" }) {
		got = append(got, c.key()+": "+c.why)
	}
	want := []string{
		"Deployment shop/behind: proxy 1.26.2 is 2 minors behind 1.28.1 (max 1)",
		"Deployment shop/old: 1 of 2 pods older than 30d (oldest 40d)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("candidates:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestContractSaysWhatThePolicyDoes(t *testing.T) {
	p := v1alpha1.PodAgePolicy{ObjectMeta: metav1.ObjectMeta{Name: "age"}, Spec: v1alpha1.PodAgePolicySpec{
		MaxAge:             &v1alpha1.Duration{Duration: 720 * time.Hour},
		Notice:             &v1alpha1.Duration{Duration: 48 * time.Hour},
		MaintenanceWindows: []v1alpha1.MaintenanceWindow{{Days: []v1alpha1.Weekday{"Tue"}, Start: "22:00", End: "04:00", TimeZone: "Europe/Berlin"}},
		RateLimit:          v1alpha1.PodAgeRateLimit{PodsPerSecond: 5, NamespacePodsPerSecond: 2},
	}}
	text := strings.Join(Contract(p), "\n")
	for _, want := range []string{"PodAgePolicy age", "a pod older than 30d", "Tue 22:00", "Europe/Berlin", "at most 5 pods a second cluster-wide and 2 in one namespace",
		"at least 2d before", v1alpha1.AnnotationMaxAgeOptOutUntil, "Eviction API", "nodewise podage resume age"} {
		if !strings.Contains(text, want) {
			t.Errorf("contract lacks %q:\n%s", want, text)
		}
	}
	p.Spec.MaxAge = &v1alpha1.Duration{}
	if text := strings.Join(Contract(p), "\n"); !strings.Contains(text, "is not enforced") {
		t.Errorf("a policy without a target: %s", text)
	}
}
