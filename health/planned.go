package health

import (
	"time"

	"github.com/nodewise/nodewise/health/wire"
)

// PlannedResets estimates, for each pod and side, the connections a swap in
// place will reset: those already older than the drain deadline in the last
// snapshot before the swap. ztunnel resets every connection that survives its
// drain deadline, and a connection that old is one that does not close by itself.
//
// Only age buckets whose lower bound is at or above the deadline count, so a
// deadline between bucket bounds undercounts rather than overcounts: planned
// resets are subtracted from the regression counting, and an overcount could
// hide a real regression.
func PlannedResets(beforeSwap wire.Snapshot, deadline time.Duration) map[PodKey]uint64 {
	first := len(wire.AgeBucketBoundsSeconds) // index of the first bucket entirely ≥ deadline
	for i := range wire.AgeBucketBoundsSeconds {
		// Bucket i covers [bound[i-1], bound[i]); bucket 0 starts at 0.
		lower := 0.0
		if i > 0 {
			lower = wire.AgeBucketBoundsSeconds[i-1]
		}
		if lower >= deadline.Seconds() {
			first = i
			break
		}
	}
	out := make(map[PodKey]uint64)
	for i := range beforeSwap.Pods {
		p := &beforeSwap.Pods[i]
		var n uint64
		for j := first; j < len(p.ConnAges); j++ {
			n += p.ConnAges[j]
		}
		if n > 0 {
			out[KeyOf(p)] += n
		}
	}
	return out
}

// DrainDeadline is ztunnel's drain deadline for a termination grace period:
// grace − 5 s when grace is over 10 s, grace − 1 s otherwise, and 5 s when the
// grace period is unknown (zero).
func DrainDeadline(grace time.Duration) time.Duration {
	switch {
	case grace <= 0:
		return 5 * time.Second
	case grace > 10*time.Second:
		return grace - 5*time.Second
	default:
		return grace - time.Second
	}
}

// subtractPlanned removes planned resets from a soak window's reset counts, at
// most one reset per old connection: received first, then the rest from sent.
// It returns the number it removed per pod, for the report.
func subtractPlanned(w *Window, planned map[PodKey]uint64) map[PodKey]uint64 {
	removed := make(map[PodKey]uint64)
	if len(planned) == 0 {
		return removed
	}
	var node Counts
	for i := range w.Pods {
		p := &w.Pods[i]
		left := planned[p.PodKey]
		r := min(left, p.Counts.ResetsReceived)
		p.Counts.ResetsReceived -= r
		left -= r
		s := min(left, p.Counts.ResetsSent)
		p.Counts.ResetsSent -= s
		if r+s > 0 {
			removed[p.PodKey] = r + s
		}
		node = node.add(p.Counts)
	}
	w.Totals = node
	return removed
}

// MayBeOlderThan counts the connections in ages (a PodCounters.ConnAges) that
// may be older than age: every bucket whose upper bound is above it, the last
// (unbounded) bucket included. It is the cautious dual of PlannedResets, which
// counts only buckets entirely at or above the deadline: a count that decides
// whether a swap in place is safe must not miss a connection, so a bucket
// that straddles age counts whole. ages of the wrong length (an agent with
// other bucket bounds) count as unknown: ok is false.
func MayBeOlderThan(ages []uint64, age time.Duration) (n uint64, ok bool) {
	if len(ages) != len(wire.AgeBucketBoundsSeconds)+1 {
		return 0, false
	}
	for i, c := range ages {
		if i == len(wire.AgeBucketBoundsSeconds) || wire.AgeBucketBoundsSeconds[i] > age.Seconds() {
			n += c
		}
	}
	return n, true
}
