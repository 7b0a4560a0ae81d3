package planner

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// instant parses an RFC 3339 instant.
func instant(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// nightWindow crosses midnight and both of 2026's DST changes.
var nightWindow = v1alpha1.MaintenanceWindow{Start: "22:00", End: "04:00", TimeZone: "Europe/Berlin"}

// The planner itself, stepped by a fake clock minute by minute through the
// autumn night with one node every 100 minutes: it starts a node exactly at
// the instants Starts forecasts, and reports why it waits in between.
func TestPlanFollowsTheScheduleMinuteByMinute(t *testing.T) {
	nb := metav1.NewTime(instant("2026-10-24T20:30:00Z"))
	spec := v1alpha1.NodeRolloutSpec{
		MaintenanceWindows: []v1alpha1.MaintenanceWindow{nightWindow},
		Blackouts:          []v1alpha1.Blackout{{Start: "2026-10-25T01:00", End: "2026-10-25T02:10", TimeZone: "Europe/Berlin"}},
		NotBefore:          &nb,
	}
	p := model.MustPolicy(spec)
	nodes, tgts := fixture.Fleet(1, 4), fixture.Targets(appsv1.OnDeleteDaemonSetStrategyType)
	var got []string
	inflight, doneAt := "", time.Time{}
	for now := instant("2026-10-24T18:00:00Z"); now.Before(instant("2026-10-26T06:00:00Z")); now = now.Add(time.Minute) {
		if inflight != "" && !now.Before(doneAt) {
			fixture.Upgrade(nodes, inflight)
			fixture.SetState(nodes, inflight, v1alpha1.NodeDone)
			inflight = ""
		}
		d := Plan(model.Snapshot{Nodes: nodes, Targets: tgts}, p, now)
		for _, a := range d.Actions {
			if a.Kind != ActStart {
				continue
			}
			if inflight != "" {
				t.Fatalf("%s: %s started while %s is in flight (maxParallel 1)", now, a.Node, inflight)
			}
			got = append(got, now.UTC().Format(time.RFC3339))
			fixture.SetState(nodes, a.Node, v1alpha1.NodeDrain)
			inflight, doneAt = a.Node, now.Add(100*time.Minute)
		}
		if d.Phase == v1alpha1.PhaseWaitingForWindow && d.NextWindow.IsZero() {
			t.Fatalf("%s: waiting with no next opening: %s", now, d.Reason)
		}
	}
	// notBefore 20:30 UTC (22:30 CEST), 00:10 CEST=22:10 UTC, then the
	// blackout 01:00–02:10 CEST (23:00–00:10 UTC) holds 23:50 UTC to 00:10,
	// 01:50 UTC (02:50 CET).
	want := []string{"2026-10-24T20:30:00Z", "2026-10-24T22:10:00Z", "2026-10-25T00:10:00Z", "2026-10-25T01:50:00Z"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("planner starts\n got %v\nwant %v", got, want)
	}
	starts, _, ok := p.Starts(instant("2026-10-24T18:00:00Z"), []time.Duration{100 * time.Minute, 100 * time.Minute, 100 * time.Minute, 100 * time.Minute})
	fc := make([]string, len(starts))
	for i, s := range starts {
		fc[i] = s.UTC().Format(time.RFC3339)
	}
	if !ok || strings.Join(fc, " ") != strings.Join(want, " ") {
		t.Fatalf("forecast %v (every node starts: %v) differs from the planner's %v", fc, ok, want)
	}
}

// plan's forecast names the windows, blackouts and notBefore, the next
// opening and the end counting them.
func TestRenderPlanForecastsTheSchedule(t *testing.T) {
	nb := metav1.NewTime(instant("2026-12-01T22:00:00Z"))
	p := model.MustPolicy(v1alpha1.NodeRolloutSpec{
		MaintenanceWindows: []v1alpha1.MaintenanceWindow{nightWindow},
		Blackouts:          []v1alpha1.Blackout{{Start: "2026-12-01T23:30", End: "2026-12-02T02:00", TimeZone: "Europe/Berlin", Reason: "release freeze"}},
		NotBefore:          &nb,
	})
	order := []PlannedNode{{Name: "a", Wave: 1}, {Name: "b", Wave: 2}, {Name: "c", Wave: 3}}
	var b strings.Builder
	if err := RenderPlan(&b, Decision{Order: order}, p, instant("2026-12-01T12:00:00Z"), 3*3*time.Hour); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"every day 22:00–04:00 Europe/Berlin (crosses midnight)",
		"2026-12-01T22:30:00Z – 2026-12-02T01:00:00Z release freeze",
		"Not before: 2026-12-01T22:00:00Z",
		"Next opening: 2026-12-01T22:00:00Z (in 10h0m0s; now not before 2026-12-01T22:00:00Z)",
		// 23:00 CET+3h = 02:00 CET, inside the blackout until 02:00: the
		// second wave starts at 02:00 CET (01:00 UTC), ends 04:00 UTC, out
		// of the window: the third starts the next night, 21:00 UTC.
		"Estimated end: 2026-12-03T00:00:00Z, counting windows, blackouts and notBefore (3 wave(s) of 3h0m0s each, the last starting 2026-12-02T21:00:00Z)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("plan output lacks %q:\n%s", want, out)
		}
	}
}
