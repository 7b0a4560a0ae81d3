package record

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/health/wire"
)

func TestRecorderWindowsAndRetention(t *testing.T) {
	start := time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC)
	now := start
	src := health.SnapshotFunc(func(context.Context, string) (wire.Snapshot, error) {
		return wire.Snapshot{Node: "n", Time: now, StartTime: start}, nil
	})
	r, err := NewRecorder(RecorderConfig{Source: src, Every: time.Minute, Keep: 10 * time.Minute, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := r.Track(ctx, "n"); err != nil {
		t.Fatal(err)
	}
	for range 15 {
		now = now.Add(time.Minute)
		_ = r.Sample(ctx, "n")
		_ = r.Sample(ctx, "n") // same time again: not a new sample
	}
	// Kept: the last 10 minutes (04:05 … 04:15).
	base, soak, err := r.Windows("n", start, start.Add(8*time.Minute), start.Add(12*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(base) != 4 || !base[0].Time.Equal(start.Add(5*time.Minute)) || !soak.Time.Equal(start.Add(12*time.Minute)) {
		t.Errorf("baseline %d samples from %s, soak at %s", len(base), base[0].Time, soak.Time)
	}
	if _, _, err := r.Windows("n", start, start.Add(time.Minute), start.Add(time.Hour)); err == nil || !strings.Contains(err.Error(), "no snapshot recorded since the soak") {
		t.Errorf("soak not sampled yet: %v", err)
	}
	r.Untrack("n")
	if _, _, err := r.Windows("n", start, start, start); err == nil || !strings.Contains(err.Error(), "never tracked") {
		t.Errorf("untracked: %v", err)
	}
	if _, err := NewRecorder(RecorderConfig{Source: src, Every: time.Hour, Keep: time.Minute}); err == nil {
		t.Error("Keep shorter than Every must be refused")
	}
}
