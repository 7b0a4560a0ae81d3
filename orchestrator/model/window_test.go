package model

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// clock is a fake clock walking a rollout forward: each node takes perNode
// once started; the next starts at the next opening after the one before it
// finishes, as the planner (Plan, maxParallel 1) would start it when its
// resync tick lands there. starts lists the exact start instants, in UTC.
func clockStarts(t *testing.T, p Policy, from time.Time, nodes int, perNode time.Duration) []string {
	t.Helper()
	waves := make([]time.Duration, nodes)
	for i := range waves {
		waves[i] = perNode
	}
	starts, _, ok := p.Starts(from, waves)
	if !ok {
		t.Fatalf("some node never starts")
	}
	out := make([]string, len(starts))
	for i, s := range starts {
		// What the planner itself says at that instant and a minute before.
		if why := p.Closed(s); why != "" {
			t.Fatalf("start %s is closed: %s", s, why)
		}
		out[i] = s.UTC().Format(time.RFC3339)
	}
	return out
}

var berlinNight = v1alpha1.MaintenanceWindow{Start: "22:00", End: "04:00", TimeZone: "Europe/Berlin"}

// The exact starts of a six-node rollout, one node per 100 minutes, through
// both DST nights: each night's starts stop where the window closes, and the
// rest go on the next night.
func TestWindowStartsAcrossDSTWithFakeClock(t *testing.T) {
	p := MustPolicy(v1alpha1.NodeRolloutSpec{MaintenanceWindows: []v1alpha1.MaintenanceWindow{berlinNight}})
	spring := clockStarts(t, p, utc("2026-03-28T12:00:00Z"), 6, 100*time.Minute)
	want := []string{
		// Sat 22:00 CET, 23:40 CET, 01:20 CET, then 03:00: the clock jumped
		// to 04:00 CEST, closed. Sun 22:00 CEST = 20:00 UTC.
		"2026-03-28T21:00:00Z", "2026-03-28T22:40:00Z", "2026-03-29T00:20:00Z",
		"2026-03-29T20:00:00Z", "2026-03-29T21:40:00Z", "2026-03-29T23:20:00Z",
	}
	if strings.Join(spring, " ") != strings.Join(want, " ") {
		t.Fatalf("spring starts\n got %v\nwant %v", spring, want)
	}
	autumn := clockStarts(t, p, utc("2026-10-24T12:00:00Z"), 6, 100*time.Minute)
	want = []string{
		// Sat 22:00 CEST (20:00 UTC), 23:40, 01:20, 02:00 CET the second
		// time (01:00 UTC), 03:40 CET; 04:00 CET closes, Sun 22:00 CET.
		"2026-10-24T20:00:00Z", "2026-10-24T21:40:00Z", "2026-10-24T23:20:00Z",
		"2026-10-25T01:00:00Z", "2026-10-25T02:40:00Z", "2026-10-25T21:00:00Z",
	}
	if strings.Join(autumn, " ") != strings.Join(want, " ") {
		t.Fatalf("autumn starts\n got %v\nwant %v", autumn, want)
	}
}

// A blackout inside a window holds the starts that would fall in it; the
// next start is the blackout's end, still inside the window.
func TestBlackoutInsideAWindow(t *testing.T) {
	p := MustPolicy(v1alpha1.NodeRolloutSpec{
		MaintenanceWindows: []v1alpha1.MaintenanceWindow{berlinNight},
		Blackouts:          []v1alpha1.Blackout{{Start: "2026-12-01T23:30", End: "2026-12-02T02:00", TimeZone: "Europe/Berlin", Reason: "release freeze"}},
	})
	got := clockStarts(t, p, utc("2026-12-01T12:00:00Z"), 5, time.Hour)
	want := []string{
		// Tue 22:00 CET, 23:00, [23:30–02:00 blackout], 02:00, 03:00, then Wed 22:00.
		"2026-12-01T21:00:00Z", "2026-12-01T22:00:00Z",
		"2026-12-02T01:00:00Z", "2026-12-02T02:00:00Z", "2026-12-02T21:00:00Z",
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("starts\n got %v\nwant %v", got, want)
	}
	if why := p.Closed(utc("2026-12-01T23:00:00Z")); !strings.Contains(why, "blackout until 2026-12-02T01:00:00Z (release freeze)") {
		t.Fatalf("inside the blackout: %q", why)
	}
	if _, err := NewPolicy(v1alpha1.NodeRolloutSpec{Blackouts: []v1alpha1.Blackout{{Start: "2026-12-02T02:00", End: "2026-12-01T23:30"}}}); err == nil || !strings.Contains(err.Error(), "spec.blackouts[0]: end") {
		t.Fatalf("reversed blackout: %v", err)
	}
	if _, err := NewPolicy(v1alpha1.NodeRolloutSpec{Blackouts: []v1alpha1.Blackout{{Start: "2026-12-01", End: "2026-12-02T02:00"}}}); err == nil || !strings.Contains(err.Error(), "is not YYYY-MM-DDTHH:MM") {
		t.Fatalf("date without time: %v", err)
	}
}

// notBefore holds every start until it, then the windows rule; with no
// windows the first start is notBefore itself.
func TestNotBefore(t *testing.T) {
	nb := metav1.NewTime(utc("2026-12-02T22:30:00Z"))
	p := MustPolicy(v1alpha1.NodeRolloutSpec{MaintenanceWindows: []v1alpha1.MaintenanceWindow{berlinNight}, NotBefore: &nb})
	got := clockStarts(t, p, utc("2026-12-01T12:00:00Z"), 3, 2*time.Hour)
	// 23:30 CET, 01:30, 03:30 (the window closes at 04:00 CET, 03:00 UTC).
	want := []string{"2026-12-02T22:30:00Z", "2026-12-03T00:30:00Z", "2026-12-03T02:30:00Z"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("starts\n got %v\nwant %v", got, want)
	}
	bare := MustPolicy(v1alpha1.NodeRolloutSpec{NotBefore: &nb})
	if got := clockStarts(t, bare, utc("2026-12-01T12:00:00Z"), 2, time.Hour); strings.Join(got, " ") != "2026-12-02T22:30:00Z 2026-12-02T23:30:00Z" {
		t.Fatalf("notBefore alone: %v", got)
	}
}
