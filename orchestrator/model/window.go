package model

import (
	"time"

	"github.com/nodewise/nodewise/orchestrator/timewindow"
)

// Closed says why no node may start at t under the policy's notBefore,
// blackouts and windows, or "" when one may.
func (p Policy) Closed(t time.Time) string {
	if t.Before(p.NotBefore) {
		return "not before " + p.NotBefore.UTC().Format(time.RFC3339)
	}
	for _, b := range p.Blackouts {
		if !t.Before(b.Start) && t.Before(b.End) {
			why := "inside a blackout until " + b.End.UTC().Format(time.RFC3339)
			if b.Reason != "" {
				why += " (" + b.Reason + ")"
			}
			return why
		}
	}
	if !timewindow.InAnyWindow(p.Windows, t) {
		return "outside every maintenance window"
	}
	return ""
}

// NextOpening is the first time at or after t when a node may start (t
// itself when one may now); ok is false when none comes within the windows'
// eight-day horizon of the last blackout or notBefore.
func (p Policy) NextOpening(t time.Time) (time.Time, bool) {
	// Each pass moves t past one obstacle; every obstacle is passed at most
	// once, so the loop ends.
	for range len(p.Blackouts) + 3 {
		moved := false
		if t.Before(p.NotBefore) {
			t, moved = p.NotBefore, true
		}
		for _, b := range p.Blackouts {
			if !t.Before(b.Start) && t.Before(b.End) {
				t, moved = b.End, true
			}
		}
		if !timewindow.InAnyWindow(p.Windows, t) {
			next, ok := timewindow.NextWindowOpen(p.Windows, t)
			if !ok {
				return time.Time{}, false
			}
			t, moved = next, true
		}
		if !moved {
			return t, true
		}
	}
	if p.Closed(t) == "" {
		return t, true
	}
	return time.Time{}, false
}

// Starts lists the times the waves of a rollout would start from now, each
// wave taking perWave, under the policy's windows, blackouts and notBefore:
// a wave starts at the next opening after the one before it ends (a wave in
// flight finishes even after its window closes). The end is when the last
// wave finishes; ok is false when some wave would never start.
func (p Policy) Starts(now time.Time, waves []time.Duration) (starts []time.Time, end time.Time, ok bool) {
	t := now
	for _, d := range waves {
		open, found := p.NextOpening(t)
		if !found {
			return starts, time.Time{}, false
		}
		starts = append(starts, open)
		t = open.Add(d)
	}
	return starts, t, true
}
