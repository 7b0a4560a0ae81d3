package health

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// The sequential method spends SequentialShare of gates.significance on
// looks at the soak so far while the node soaks, one every LookEvery, and
// tests the judgement at the soak's end at the rest. The looks and the end
// are all tests of the same hypothesis ("the node did not regress"), so by
// the union bound the chance that a healthy node fails anywhere in its soak
// stays within the significance, as the fixed method's single test at the
// end does; and the end's judgement, at a smaller α, rejects only what the
// fixed method's would. The share is spent as α·share·(t/T)^SpendingPower
// by the soak's time t of its length T (a power spending function, in the
// manner of O'Brien and Fleming): the first seconds' windows hold a few
// clumps of resets, whose p-values read smaller than their chance, so an
// early look must see overwhelming evidence (a build that resets a quarter
// of connections gives p < 10⁻³⁰ in seconds), and the share grows as the
// window does.
const (
	SequentialShare = 0.1
	SpendingPower   = 3
	LookEvery       = 5 * time.Second
)

// Looks is how many looks a soak of length soak gets: one every LookEvery
// before its end (at least one).
func Looks(soak time.Duration) int {
	return max(1, int((soak-1)/LookEvery))
}

// LookSignificance is the family-wise α of the look at elapsed in a soak
// of length soak: the share the spending function adds between the
// previous look and this one. Each look slot (elapsed / LookEvery, from 1
// to Looks) has its own and a look past the last spends none, so the looks
// together spend at most SequentialShare of alpha (a successor leader that
// looks again in a slot its predecessor looked in spends that slot twice).
func LookSignificance(alpha float64, soak, elapsed time.Duration) float64 {
	k := max(1, int(elapsed/LookEvery))
	if k > Looks(soak) {
		return 0 // past the last look: the end's judgement decides
	}
	spent := func(k int) float64 {
		return math.Pow(float64(time.Duration(k)*LookEvery)/float64(soak), SpendingPower)
	}
	return alpha * SequentialShare * (spent(k) - spent(k-1))
}

// endSignificance is the α of the judgement at the soak's end: all of it
// under the fixed method, the part the looks did not spend under the
// sequential one.
func (c Config) endSignificance() float64 {
	if !c.Sequential {
		return c.Significance
	}
	return c.Significance * (1 - SequentialShare)
}

// method names the decision method for a person.
func (c Config) method() string {
	if !c.Sequential {
		return "fixed test"
	}
	return "sequential test"
}

// look is a look during the soak: at is how long the node has soaked.
type look struct{ at time.Duration }

// Look tests the node's soak so far, at elapsed of a soak of length
// in.Soak, under the sequential method: the judgement of Judge, at
// LookSignificance, with one failing look enough, no external gate (they
// are queried at the soak's end) and no inconclusive policy. It returns the
// verdict and true only when a regression in the judged families is
// conclusive: the node fails now, before its soak's end. Anything else (no
// regression, too little traffic, an agent that did not answer) is no
// decision: the soak goes on and the judgement at its end decides. Under
// the fixed method it never decides.
func (j *Judge) Look(ctx context.Context, in Input, elapsed time.Duration) (Verdict, bool, error) {
	cfg, err := NewConfig(in.Gates)
	if err != nil {
		return Verdict{}, false, fmt.Errorf("judge: %w", err)
	}
	if !cfg.Sequential || in.Soak <= 0 {
		return Verdict{}, false, nil
	}
	cfg.Significance = LookSignificance(cfg.Significance, in.Soak, elapsed)
	cfg.ConsecutiveFailures = 1
	cfg.Inconclusive = v1alpha1.InconclusivePause
	in.Gates, in.External, in.Previous, in.look = cfg, nil, nil, &look{at: elapsed}
	v, err := j.Judge(ctx, in)
	if err != nil || v.Outcome != Fail || v.Summary == nil || v.Summary.Regressions == 0 {
		return v, false, err
	}
	j.record(Input{Node: in.Node}, v)
	return v, true, nil
}

// decide says which kind of decision v is and when: on its summary, in
// its headline (an early failure's, after the evidence) and as its last reason.
func decide(in Input, v Verdict) Verdict {
	if v.Outcome == Inconclusive || v.Summary == nil || in.look != nil && v.Outcome != Fail {
		return v // a look decides only a failure
	}
	cfg, judged := in.Gates, time.Duration(v.Summary.SoakSeconds)*time.Second
	var d string
	switch {
	case in.look != nil:
		d = fmt.Sprintf("failed early at %s of %s soak, %s", clock(in.look.at), clock(in.Soak), cfg.method())
	case in.Soak > 0:
		d = fmt.Sprintf("%s at %s, after the %s soak, %s", decided(v.Outcome), clock(judged), clock(in.Soak), cfg.method())
	default:
		d = fmt.Sprintf("%s at %s of soak, %s", decided(v.Outcome), clock(judged), cfg.method())
	}
	v.Summary.Decision = d
	if in.look != nil {
		v.Headline = joinHeadline(Cut(v.Headline, HeadlineMax-len(d)-2), d) // the halt says it came early
	}
	v.Reasons = append(v.Reasons, d)
	return v
}

func decided(o Outcome) string {
	if o == Pass {
		return "passed"
	}
	return "failed"
}

// clock prints a soak time as minutes:seconds, 0:12 or 5:00.
func clock(d time.Duration) string {
	s := int(d.Round(time.Second) / time.Second)
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}

// NextLook is the first look after now in a soak that began at since: looks
// fall every LookEvery from the soak's start, so a resumed soak keeps their
// times.
func NextLook(since, now time.Time) time.Time {
	k := max(0, now.Sub(since)/LookEvery) + 1
	return since.Add(k * LookEvery)
}
