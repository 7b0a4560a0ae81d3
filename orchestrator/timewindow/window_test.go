package timewindow

import (
	"testing"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

var berlinNight = v1alpha1.MaintenanceWindow{Start: "22:00", End: "04:00", TimeZone: "Europe/Berlin"}

// A 22:00–04:00 Berlin window crosses midnight; on the night of the spring
// change (Sun 29 Mar 2026, 02:00 CET -> 03:00 CEST) it lasts 5 real hours, on
// the autumn one (Sun 25 Oct 2026, 03:00 CEST -> 02:00 CET) 7.
func TestWindowAcrossMidnightAndBothDSTChanges(t *testing.T) {
	w, err := ParseWindow(berlinNight)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name       string
		at         string
		open       bool
		next, ends string
	}{
		{"winter evening before", "2026-03-28T20:59:00Z", false, "2026-03-28T21:00:00Z", ""},
		{"winter 22:00 CET", "2026-03-28T21:00:00Z", true, "2026-03-28T21:00:00Z", "2026-03-29T02:00:00Z"},
		{"after midnight, same window", "2026-03-28T23:30:00Z", true, "2026-03-28T23:30:00Z", "2026-03-29T02:00:00Z"},
		{"the skipped hour does not exist: 01:30 UTC is 03:30 CEST", "2026-03-29T01:30:00Z", true, "2026-03-29T01:30:00Z", "2026-03-29T02:00:00Z"},
		{"04:00 CEST is 02:00 UTC: closed", "2026-03-29T02:00:00Z", false, "2026-03-29T20:00:00Z", ""},
		{"summer 22:00 CEST is 20:00 UTC", "2026-03-29T20:00:00Z", true, "2026-03-29T20:00:00Z", "2026-03-30T02:00:00Z"},
		{"autumn night opens 22:00 CEST", "2026-10-24T20:00:00Z", true, "2026-10-24T20:00:00Z", "2026-10-25T03:00:00Z"},
		{"first 02:30 (CEST)", "2026-10-25T00:30:00Z", true, "2026-10-25T00:30:00Z", "2026-10-25T03:00:00Z"},
		{"second 02:30 (CET)", "2026-10-25T01:30:00Z", true, "2026-10-25T01:30:00Z", "2026-10-25T03:00:00Z"},
		{"04:00 CET is 03:00 UTC: closed", "2026-10-25T03:00:00Z", false, "2026-10-25T21:00:00Z", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			at := utc(tc.at)
			if got := w.Contains(at); got != tc.open {
				t.Fatalf("Contains(%s) = %v, want %v", tc.at, got, tc.open)
			}
			next, ok := w.NextOpen(at)
			if !ok || next.UTC().Format(time.RFC3339) != tc.next {
				t.Fatalf("NextOpen(%s) = %v %v, want %s", tc.at, next.UTC(), ok, tc.next)
			}
			end, ok := w.ClosesAt(at)
			if got := ""; ok {
				got = end.UTC().Format(time.RFC3339)
				if got != tc.ends {
					t.Fatalf("ClosesAt(%s) = %s, want %s", tc.at, got, tc.ends)
				}
			} else if tc.ends != "" {
				t.Fatalf("ClosesAt(%s): not open, want %s", tc.at, tc.ends)
			}
		})
	}
	// Real lengths of the three nights: an ordinary one, spring, autumn.
	for open, want := range map[string]time.Duration{
		"2026-03-27T21:00:00Z": 6 * time.Hour, // Fri night, winter
		"2026-03-28T21:00:00Z": 5 * time.Hour, // Sat night, spring forward
		"2026-10-24T20:00:00Z": 7 * time.Hour, // Sat night, fall back
	} {
		end, ok := w.ClosesAt(utc(open))
		if !ok || end.Sub(utc(open)) != want {
			t.Errorf("night opening %s lasts %s, want %s", open, end.Sub(utc(open)), want)
		}
	}
}

// A 02:30 start on the spring-forward day opens when the clock jumps (03:00
// CEST), the next day at 02:30 CEST again; a 02:30 start on the autumn day
// opens at the first 02:30 and a 02:45 end closes at the first 02:45.
func TestWindowStartInsideTheChangedHour(t *testing.T) {
	w, err := ParseWindow(v1alpha1.MaintenanceWindow{Start: "02:30", End: "05:00", TimeZone: "Europe/Berlin"})
	if err != nil {
		t.Fatal(err)
	}
	for from, want := range map[string]string{
		"2026-03-28T12:00:00Z": "2026-03-29T01:00:00Z", // 03:00 CEST, the jump
		"2026-03-29T12:00:00Z": "2026-03-30T00:30:00Z", // 02:30 CEST
		"2026-03-27T12:00:00Z": "2026-03-28T01:30:00Z", // 02:30 CET
	} {
		if got, _ := w.NextOpen(utc(from)); got.UTC().Format(time.RFC3339) != want {
			t.Errorf("NextOpen(%s) = %s, want %s", from, got.UTC().Format(time.RFC3339), want)
		}
	}
	short, err := ParseWindow(v1alpha1.MaintenanceWindow{Start: "02:30", End: "02:45", TimeZone: "Europe/Berlin"})
	if err != nil {
		t.Fatal(err)
	}
	open, _ := short.NextOpen(utc("2026-10-24T12:00:00Z"))
	end, _ := short.ClosesAt(open)
	if open.UTC().Format(time.RFC3339) != "2026-10-25T00:30:00Z" || end.UTC().Format(time.RFC3339) != "2026-10-25T00:45:00Z" {
		t.Fatalf("autumn 02:30–02:45 is %s–%s, want the first pass 00:30–00:45 UTC", open.UTC(), end.UTC())
	}
	if short.Contains(utc("2026-10-25T01:35:00Z")) {
		t.Fatal("the second 02:35 (CET) opened the window again: it opens once a day")
	}
}

func TestWindowContainsUsesTimeZoneAndDays(t *testing.T) {
	w, err := ParseWindow(v1alpha1.MaintenanceWindow{Days: []v1alpha1.Weekday{"Sat"}, Start: "22:00", End: "24:00", TimeZone: "America/New_York"})
	if err != nil {
		t.Fatal(err)
	}
	satNY2230 := time.Date(2026, 11, 29, 3, 30, 0, 0, time.UTC) // Sun 03:30 UTC = Sat 22:30 EST
	if !w.Contains(satNY2230) {
		t.Fatal("Sat 22:30 New York should be inside")
	}
	if w.Contains(satNY2230.Add(2 * time.Hour)) {
		t.Fatal("Sun 00:30 New York should be outside")
	}
	next, ok := w.NextOpen(satNY2230.Add(2 * time.Hour))
	if !ok || !next.Equal(time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)) {
		t.Fatalf("next open %v %v, want next Saturday 22:00 EST", next, ok)
	}
}
