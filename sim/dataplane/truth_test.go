package dataplane

import (
	"testing"
	"time"
)

// A window's resets are those the later reading has and the earlier did
// not, whatever order the pods were summed in: the live tests flaked when a
// reset from before the window came out as the tail of the later reading.
func TestTruthSubMatchesResetsNotTheTail(t *testing.T) {
	t0 := time.Now()
	a := Truth{StreamsReset: 1, Resets: []StreamReset{{At: t0, Age: 300 * time.Millisecond}}}            // pod a, before the window
	b := Truth{StreamsReset: 1, Resets: []StreamReset{{At: t0.Add(time.Second), Age: 19 * time.Second}}} // pod b, before
	bLater := Truth{StreamsReset: 2, Resets: append(b.Resets, StreamReset{At: t0.Add(9 * time.Second), Age: 18 * time.Second})}
	before := a.Add(b)
	after := bLater.Add(a) // summed the other way round
	w := after.Sub(before)
	if w.StreamsReset != 1 || len(w.Resets) != 1 || w.MinResetAge() != 18*time.Second {
		t.Fatalf("window %+v: want only the 18 s stream reset in it", w)
	}
	if got := after.Sub(after); len(got.Resets) != 0 {
		t.Errorf("a reading minus itself has resets %v", got.Resets)
	}
}
