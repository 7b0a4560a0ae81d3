package record

import (
	"fmt"
	"strings"
	"time"

	"github.com/nodewise/nodewise/health/wire"
)

// DefaultSkewTolerance is how far an agent's time may lie outside the
// request's interval on the orchestrator's clock before it counts as skew:
// NTP keeps clocks within milliseconds, and an agent stamps a snapshot only
// after reading it, which on a busy node takes up to a few hundred ms.
const DefaultSkewTolerance = time.Second

// sample is one answer of a node agent, placed on the orchestrator's clock.
type sample struct {
	snap           wire.Snapshot // as the agent sent it
	sent, received time.Time     // the orchestrator's clock around the request
	// at is where the sample sits on the orchestrator's clock: the agent's
	// own time when it lies within [sent − tolerance, received + tolerance],
	// else the agent's time less the epoch's measured shift, else received.
	// Every window the judge makes from Recorder samples runs from one at to
	// another, so no agent clock can stretch a rate's duration by more than
	// the tolerance and the request's round trip.
	at time.Time
	// shift is snap.Time − at: what the agent's clock is taken to be ahead by.
	shift time.Duration
	// offset is snap.Time − the request's midpoint, as measured on this
	// answer (positive: the agent's clock runs ahead).
	offset time.Duration
	// skewed: the agent's own time lay outside the tolerance.
	skewed bool
	// history: read back from the agent's history (Backfill), not sampled
	// by the Recorder as it was taken.
	history bool
}

// placed is the snapshot with its time on the orchestrator's clock.
func (s sample) placed() wire.Snapshot {
	p := s.snap
	p.Time = s.at
	return p
}

// sameEpoch says two snapshots' counters can be compared: the same agent
// process (start time) on the same node.
func sameEpoch(a, b wire.Snapshot) bool {
	return a.Node == b.Node && a.StartTime.Equal(b.StartTime)
}

// isNew says s is a new answer after prev. Within one epoch an agent that
// sends a seq is new only when its seq advanced, whatever its time says (an
// agent serving an old snapshot with a fresh time is not new); one without a
// seq (older agents) is new when its time advanced. A new epoch (the agent
// restarted) is always new: NewWindow refuses to subtract across it.
func isNew(prev, s wire.Snapshot) bool {
	if !sameEpoch(prev, s) {
		return true
	}
	if prev.Seq != 0 && s.Seq != 0 {
		return s.Seq > prev.Seq
	}
	return s.Time.After(prev.Time)
}

// place puts an answer on the orchestrator's clock, given the previous
// sample of the node (nil for the first). Candidates, the first that lies
// within [sent − tol, received + tol] and after the previous sample of the
// same epoch wins: the agent's own time (its clock agrees); the agent's time
// less the shift measured earlier in the epoch (its clock is off by a steady
// amount, so its own deltas, which are the counters' true intervals, are
// kept); received (the shift changed: re-measure it).
func place(prev *sample, s wire.Snapshot, sent, received time.Time, tol time.Duration) sample {
	out := sample{snap: s, sent: sent, received: received}
	mid := sent.Add(received.Sub(sent) / 2)
	out.offset = s.Time.Sub(mid)
	lo, hi := sent.Add(-tol), received.Add(tol)
	within := func(t time.Time) bool { return !t.Before(lo) && !t.After(hi) }
	out.skewed = !within(s.Time)
	var after time.Time // placed times increase within an epoch
	candidates := []time.Duration{0}
	if prev != nil && sameEpoch(prev.snap, s) {
		after = prev.at
		if prev.shift != 0 {
			candidates = append(candidates, prev.shift)
		}
	}
	for _, shift := range candidates {
		if t := s.Time.Add(-shift); within(t) && t.After(after) {
			out.at, out.shift = t, shift
			return out
		}
	}
	out.at = received
	if !out.at.After(after) {
		// Answers less than the tolerance apart, the previous one placed
		// ahead of this one's receipt: keep the order.
		out.at = after.Add(time.Millisecond)
	}
	out.shift = s.Time.Sub(out.at)
	return out
}

// Clock is what the Recorder measured of one node agent's clock over the
// samples of a judgement (from the baseline's start on). The judge's reasons
// carry it when it mattered (Mattered).
type Clock struct {
	Node      string
	Tolerance time.Duration
	// Samples are the samples from the baseline's start on; Skewed those whose
	// agent time lay outside [sent − Tolerance, received + Tolerance], placed
	// on the orchestrator's clock instead.
	Samples, Skewed int
	// Offset is the newest sample's measured offset (agent − orchestrator,
	// at the request's midpoint; positive: the agent runs ahead), MaxOffset
	// the largest in magnitude over the samples.
	Offset, MaxOffset time.Duration
	// Misplaced counts the samples the agent's own time would have put in
	// another window: in the baseline though sent before it or answered after
	// the swap started (or the reverse), or as the soak's first sample.
	Misplaced int
	// Repeats counts the answers since the newest sample that were not new
	// because their seq, RepeatSeq, did not advance. (An agent without a seq
	// that repeats its time is not counted: that is its old staleness rule,
	// which the judge's maxSnapshotAge reports.)
	Repeats   int
	RepeatSeq uint64
	// NoSeq: the agent sends no seq (an older agent); a repeated answer is
	// then told by its time alone.
	NoSeq bool
}

// Mattered says the agent's clock or its repeats changed what the judge
// read: a sample was placed on the orchestrator's clock, or a repeated
// answer was not counted as new.
func (c Clock) Mattered() bool { return c.Skewed > 0 || c.Misplaced > 0 || c.Repeats > 0 }

// Reason is the sentence the judge's reasons carry when Mattered.
func (c Clock) Reason() string {
	var parts []string
	if c.Skewed > 0 || c.Misplaced > 0 {
		dir := "ahead of"
		off := c.MaxOffset
		if off < 0 {
			dir, off = "behind", -off
		}
		s := fmt.Sprintf("agent clock on node %s ran up to %s %s the orchestrator's (tolerance %s, last measured %s): %d of %d samples placed on the orchestrator's clock",
			c.Node, off.Round(100*time.Millisecond), dir, c.Tolerance, signed(c.Offset), c.Skewed, c.Samples)
		if c.Misplaced > 0 {
			s += fmt.Sprintf(", %d that its own clock would have put in another window (baseline or soak start)", c.Misplaced)
		}
		if c.NoSeq {
			s += "; the agent sends no seq (an older agent), so a repeated answer is told by its time alone"
		}
		parts = append(parts, s)
	}
	if c.Repeats > 0 {
		parts = append(parts, fmt.Sprintf("agent on node %s answered %d times with seq %d again since its newest snapshot: not counted as new, whatever its time said", c.Node, c.Repeats, c.RepeatSeq))
	}
	return strings.Join(parts, "; ")
}

func signed(d time.Duration) string {
	d = d.Round(100 * time.Millisecond)
	if d > 0 {
		return "+" + d.String()
	}
	return d.String()
}

// inBaseline says a sample belongs to the baseline [baselineStart,
// swapStart] by the orchestrator's clock: sent at or after its start and
// answered at or before the swap started, so the counters were surely read
// inside it, whatever the agent's clock says.
func (s sample) inBaseline(baselineStart, swapStart time.Time) bool {
	return !s.sent.Before(baselineStart) && !s.received.After(swapStart)
}

// inSoak says the sample was surely read at or after soakStart.
func (s sample) inSoak(soakStart time.Time) bool { return !s.sent.Before(soakStart) }

// clockOver reports the agent's clock over the samples of a judgement.
func clockOver(node string, list []sample, repeats int, tol time.Duration, baselineStart, swapStart, soakStart time.Time) Clock {
	c := Clock{Node: node, Tolerance: tol, Repeats: repeats}
	agentSoak, soak := -1, -1
	for i, s := range list {
		if s.sent.Before(baselineStart) && s.snap.Time.Before(baselineStart) {
			continue
		}
		c.Samples++
		c.Offset = s.offset
		if abs(s.offset) > abs(c.MaxOffset) {
			c.MaxOffset = s.offset
		}
		if s.skewed {
			c.Skewed++
		}
		if s.snap.Seq == 0 {
			c.NoSeq = true
		}
		agentBase := !s.snap.Time.Before(baselineStart) && !s.snap.Time.After(swapStart)
		if agentBase != s.inBaseline(baselineStart, swapStart) {
			c.Misplaced++
		}
		if agentSoak < 0 && !s.snap.Time.Before(soakStart) {
			agentSoak = i
		}
		if soak < 0 && s.inSoak(soakStart) {
			soak = i
		}
	}
	if agentSoak != soak && soak >= 0 {
		c.Misplaced++
	}
	if n := len(list); n > 0 && repeats > 0 {
		c.RepeatSeq = list[n-1].snap.Seq
	}
	if c.RepeatSeq == 0 {
		c.Repeats = 0
	}
	return c
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
