package health

import (
	"math"
	"sort"

	"github.com/nodewise/nodewise/health/wire"
)

// This file holds the judge's statistics, written with the standard library
// only so every line can be read and checked against the formulas below.

// binomUpperTail returns P(X ≥ k) for X ~ Binomial(n, p), summed exactly from
// the probability mass function (computed in logs with math.Lgamma). The sum
// runs over the shorter tail and stops once terms no longer change it.
func binomUpperTail(n, k uint64, p float64) float64 {
	switch {
	case k == 0:
		return 1
	case k > n:
		return 0
	case p <= 0:
		return 0
	case p >= 1:
		return 1
	}
	mean := float64(n) * p
	if float64(k) > mean {
		return binomSum(n, k, p, +1)
	}
	// Below the mean the lower tail is the short one: 1 − P(X ≤ k−1).
	return math.Max(0, 1-binomSum(n, k-1, p, -1))
}

// binomSum adds pmf(j) for j = k, k+dir, … away from the mode until the terms vanish.
func binomSum(n, k uint64, p float64, dir int) float64 {
	lp, lq := math.Log(p), math.Log1p(-p)
	logPMF := func(j uint64) float64 {
		a, _ := math.Lgamma(float64(n) + 1)
		b, _ := math.Lgamma(float64(j) + 1)
		c, _ := math.Lgamma(float64(n-j) + 1)
		return a - b - c + float64(j)*lp + float64(n-j)*lq
	}
	term := math.Exp(logPMF(k))
	sum := term
	ratio := p / (1 - p)
	j := k
	for {
		if dir > 0 {
			if j == n {
				break
			}
			term *= float64(n-j) / float64(j+1) * ratio
			j++
		} else {
			if j == 0 {
				break
			}
			term *= float64(j) / float64(n-j+1) / ratio
			j--
		}
		sum += term
		if term <= sum*1e-17 || term == 0 {
			break
		}
	}
	return math.Min(1, sum)
}

// RateTest is a one-sided test that a count's rate rose from one window to the
// next: H0 rate_after ≤ rate_before against H1 rate_after > rate_before.
type RateTest struct {
	Before, After       uint64  // counts
	BeforeExp, AfterExp float64 // exposures: window lengths in seconds
	P                   float64 // one-sided p-value
}

// Ratio is rate_after / rate_before (+Inf when the before rate is 0 and the after rate is not).
func (t RateTest) Ratio() float64 {
	rb, ra := t.RateBefore(), t.RateAfter()
	if rb == 0 {
		if ra == 0 {
			return 1
		}
		return math.Inf(1)
	}
	return ra / rb
}

func (t RateTest) RateBefore() float64 { return float64(t.Before) / t.BeforeExp }
func (t RateTest) RateAfter() float64  { return float64(t.After) / t.AfterExp }

// PoissonRateTest compares two Poisson counts observed over exposures of
// different lengths with the conditional (binomial) test: given n = before +
// after events, under H0 (equal rates) the after count is Binomial(n, q) with
// q = afterExp / (beforeExp + afterExp), so p = P(X ≥ after). The test is exact
// (it never uses a normal approximation) and conservative for discrete counts.
func PoissonRateTest(before uint64, beforeExp float64, after uint64, afterExp float64) RateTest {
	t := RateTest{Before: before, After: after, BeforeExp: beforeExp, AfterExp: afterExp, P: 1}
	if beforeExp <= 0 || afterExp <= 0 {
		return t
	}
	q := afterExp / (beforeExp + afterExp)
	t.P = binomUpperTail(before+after, after, q)
	return t
}

// RankTest is a one-sided Mann-Whitney U test that the after sample is
// stochastically larger than the before sample.
type RankTest struct {
	NBefore, NAfter uint64
	U               float64 // U of the after sample: pairs (before, after) with after > before, ties counting 1/2
	Z               float64
	P               float64
}

// MannWhitney runs the test on two log2 histograms. Every bucket is one group
// of ties (the histogram cannot order samples inside a bucket), so the variance
// uses the tie correction:
//
//	σ² = n₁n₂/12 · ((N+1) − Σ(t³−t) / (N(N−1)))
//
// and the p-value the normal approximation with a continuity correction,
// z = (U − n₁n₂/2 − ½)/σ, p = ½·erfc(z/√2). With the sample sizes the judge
// requires (MinEvents per window) the approximation is good.
func MannWhitney(before, after wire.Log2Histogram) RankTest {
	var r RankTest
	n := max(len(before.Buckets), len(after.Buckets))
	at := func(h wire.Log2Histogram, i int) float64 {
		if i < len(h.Buckets) {
			return float64(h.Buckets[i])
		}
		return 0
	}
	var below, ties float64 // before-samples in lower buckets; Σ(t³−t)
	var n1, n2 float64
	for i := 0; i < n; i++ {
		b, a := at(before, i), at(after, i)
		r.U += a * (below + b/2)
		below += b
		t := a + b
		ties += t*t*t - t
		n1 += b
		n2 += a
	}
	r.NBefore, r.NAfter = uint64(n1), uint64(n2)
	if n1 == 0 || n2 == 0 {
		r.P = 1
		return r
	}
	N := n1 + n2
	mean := n1 * n2 / 2
	variance := n1 * n2 / 12 * ((N + 1) - ties/(N*(N-1)))
	if variance <= 0 { // every sample in one bucket: no evidence of a shift
		r.P = 1
		return r
	}
	r.Z = (r.U - mean - 0.5) / math.Sqrt(variance)
	r.P = 0.5 * math.Erfc(r.Z/math.Sqrt2)
	return r
}

// Holm adjusts p-values for testing many hypotheses at once (Holm–Bonferroni
// step-down). Rejecting every hypothesis whose adjusted p-value is ≤ α keeps the
// chance of any false rejection in the family at most α, whatever the
// dependence between the tests. The result is in the input's order.
//
// We use Holm rather than Benjamini–Hochberg because a false Fail halts a whole
// rollout: the judge needs the family-wise error rate (the chance that a
// healthy node fails at all) bounded, not the expected share of false alarms
// among alarms.
func Holm(p []float64) []float64 {
	m := len(p)
	idx := make([]int, m)
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return p[idx[a]] < p[idx[b]] })
	adj := make([]float64, m)
	running := 0.0
	for rank, i := range idx {
		v := math.Min(1, float64(m-rank)*p[i])
		running = math.Max(running, v)
		adj[i] = running
	}
	return adj
}

// GeoMean returns the geometric mean of a log2 histogram in microseconds,
// taking each bucket's samples at its geometric centre (1 µs for bucket 0). It
// is the judge's estimate of typical latency: a factor-of-two bucket blurs any
// one quantile, but the mean of many log-values shifts by exactly the factor a
// slowdown multiplies latencies by. It returns 0 for an empty histogram.
func GeoMean(h wire.Log2Histogram) float64 {
	var n, sum float64
	for i, c := range h.Buckets {
		if c == 0 {
			continue
		}
		centre := 0.0 // log2 of 1 µs
		if i > 0 {
			centre = float64(i) + 0.5
		}
		n += float64(c)
		sum += float64(c) * centre
	}
	if n == 0 {
		return 0
	}
	return math.Exp2(sum / n)
}

// TailTest is a one-sided test that more of the after sample lies in the
// baseline's upper tail: the fewest top buckets that hold at least tailShare
// of the before sample (log2 buckets are coarse, so the region is usually
// larger). It compares the two tail counts as rates per sample with the
// conditional binomial test, and catches a slower tail (p99 up, median flat)
// that a rank test of location barely sees.
func TailTest(before, after wire.Log2Histogram, tailShare float64) RateTest {
	nb, na := before.Total(), after.Total()
	if nb == 0 || na == 0 {
		return RateTest{P: 1}
	}
	var above uint64
	k := len(before.Buckets)
	for i := len(before.Buckets) - 1; i >= 0 && float64(above) < tailShare*float64(nb); i-- {
		above += before.Buckets[i]
		k = i
	}
	if above == nb { // the "tail" is everything: no tail to compare
		return RateTest{P: 1}
	}
	var aAbove uint64
	for i := k; i < len(after.Buckets); i++ {
		aAbove += after.Buckets[i]
	}
	return PoissonRateTest(above, float64(nb), aAbove, float64(na))
}

// LognormalP99 estimates the 99th percentile in microseconds from the mean and
// variance of the samples' log2 bucket centres, as if they were lognormal, with
// Sheppard's correction for the bucket width (variance − 1/12). Inside a
// factor-of-two bucket an interpolated p99 barely moves when the tail grows; the
// fitted one follows the spread of the whole sample. It returns 0 for fewer
// than two samples.
func LognormalP99(h wire.Log2Histogram) float64 {
	n, mean, v, _ := centreMoments(h)
	if n < 2 {
		return 0
	}
	return math.Exp2(mean + 2.3263478740408408*math.Sqrt(v))
}

// centreMoments are the samples, the mean of their log2 bucket centres (0
// for bucket 0), the centres' variance with Sheppard's correction (− 1/12,
// at least 0), and the buckets occupied.
func centreMoments(h wire.Log2Histogram) (n, mean, variance float64, occupied int) {
	var sum, sq float64
	for i, c := range h.Buckets {
		if c == 0 {
			continue
		}
		occupied++
		x := 0.0
		if i > 0 {
			x = float64(i) + 0.5
		}
		n += float64(c)
		sum += float64(c) * x
		sq += float64(c) * x * x
	}
	if n == 0 {
		return 0, 0, 0, 0
	}
	mean = sum / n
	return n, mean, math.Max(0, sq/n-mean*mean-1.0/12), occupied
}

// LogMedian estimates log2 of the median in microseconds as if the samples
// were lognormal, by maximum likelihood on the buckets (each bucket's count
// is the probability mass between its bounds). Unlike GeoMean, which takes
// every sample at its bucket's centre, it is not blurred by the bucket
// width: a true ×1.3 reads ×1.3 within ±0.02 where the centres of a narrow
// distribution (σ 0.2) read it up to ±0.09 off. With fewer than two
// occupied buckets the fit has nothing to go on and it returns log2 of
// GeoMean. It returns ok false for an empty histogram.
func LogMedian(h wire.Log2Histogram) (mu float64, ok bool) {
	n, mu, v, occupied := centreMoments(h)
	if n == 0 {
		return 0, false
	}
	if occupied < 2 {
		return mu, true
	}
	sigma := math.Max(0.1, math.Sqrt(v))
	// Newton's method on (μ, σ) with the exact gradient and Hessian of the
	// interval-censored normal likelihood of log2 latency, halving a step
	// that would not raise the likelihood; a handful of steps converge.
	cur, gm, gs, hmm, hms, hss := logLik(h, mu, sigma)
	for range 30 {
		det := hmm*hss - hms*hms
		var sm, ss float64
		if hmm < 0 && det > 0 {
			sm, ss = -(hss*gm-hms*gs)/det, -(hmm*gs-hms*gm)/det
		} else { // not concave here: a small gradient step
			sm, ss = 0.1*gm/n, 0.1*gs/n
		}
		step, moved := 1.0, false
		for range 30 {
			nm, ns := mu+step*sm, math.Max(0.05, math.Min(8, sigma+step*ss))
			if l, a, b, c, d, e := logLik(h, nm, ns); l >= cur {
				done := math.Abs(nm-mu) < 1e-7 && math.Abs(ns-sigma) < 1e-7
				mu, sigma, cur, gm, gs, hmm, hms, hss, moved = nm, ns, l, a, b, c, d, e, true
				if done {
					return mu, true
				}
				break
			}
			step /= 2
		}
		if !moved {
			break
		}
	}
	return mu, true
}

// logLik is the log-likelihood of the buckets under a normal law of log2
// latency (mean mu, deviation sigma), with its gradient and Hessian in
// (μ, σ). With z a bound's standardised value and φ the normal density,
// ∂P/∂μ = −Δφ/σ and ∂P/∂σ = −Δ(zφ)/σ over the bucket's two bounds (φ = zφ
// = 0 at ±∞).
func logLik(h wire.Log2Histogram, mu, sigma float64) (l, gm, gs, hmm, hms, hss float64) {
	nb := len(h.Buckets)
	for i, c := range h.Buckets {
		if c == 0 {
			continue
		}
		// φ, zφ, z²φ and (z³−z)φ at the lower and upper bounds (bucket 0
		// reaches down to −∞, the last up to +∞, where all are 0).
		var a, az, az2, a3, b, bz, bz2, b3 float64
		bound := func(x float64) (float64, float64, float64, float64) {
			z := (x - mu) / sigma
			f := math.Exp(-z*z/2) / math.Sqrt(2*math.Pi)
			return f, z * f, z * z * f, (z*z*z - z) * f
		}
		if i > 0 {
			a, az, az2, a3 = bound(float64(i))
		}
		if i < nb-1 {
			b, bz, bz2, b3 = bound(float64(i + 1))
		}
		p := math.Max(1e-300, bucketMass(i, nb, mu, sigma))
		s2 := sigma * sigma
		pm, ps := -(b-a)/sigma, -(bz-az)/sigma
		pmm := -(bz - az) / s2
		pms := (b-a)/s2 - (bz2-az2)/s2
		pss := (bz-az)/s2 - (b3-a3)/s2
		w := float64(c)
		l += w * math.Log(p)
		gm += w * pm / p
		gs += w * ps / p
		hmm += w * (pmm/p - pm*pm/(p*p))
		hms += w * (pms/p - pm*ps/(p*p))
		hss += w * (pss/p - ps*ps/(p*p))
	}
	return l, gm, gs, hmm, hms, hss
}

// bucketMass is the probability of bucket i of nb under a normal law of
// log2 latency with mean mu and deviation sigma: bucket 0 holds everything
// below 1 (2 µs), the last everything from its lower bound up.
func bucketMass(i, nb int, mu, sigma float64) float64 {
	upper := func(x float64) float64 { return 0.5 * math.Erfc((x-mu)/sigma/math.Sqrt2) }  // P(X ≥ x)
	lower := func(x float64) float64 { return 0.5 * math.Erfc(-(x-mu)/sigma/math.Sqrt2) } // P(X < x)
	lo, hi := float64(i), float64(i+1)
	switch {
	case i == 0:
		return lower(1)
	case i == nb-1:
		return upper(lo)
	case lo > mu: // in a tail, differences of small numbers stay exact
		return upper(lo) - upper(hi)
	}
	return lower(hi) - lower(lo)
}
