package health

import (
	"math"

	"github.com/nodewise/nodewise/health/wire"
)

// This file holds the control group's test: did a node's rate move more than
// the control nodes' rate over the same interval? Like the rest of the
// judge's statistics it is conditional and exact, with the standard library only.

// RatioOfRatesTest is a one-sided difference-in-differences test for Poisson
// counts: the node's after/before rate ratio against the control's.
type RatioOfRatesTest struct {
	// Theta is the control's after/before rate ratio (+Inf when its before rate is 0).
	Theta float64
	// Rho is the node's ratio divided by the control's: the rise that is the node's own.
	Rho float64
	P   float64 // one-sided p-value of H0 rho ≤ 1
}

// RatioOfRates tests H0 "the node's rate rose no more than the control's"
// against H1 "it rose more". a and b are the node's counts before and after,
// over exposures ea and eb; c and d the control's, over ec and ed.
//
// Conditional on each group's total (n₁ = a+b, n₂ = c+d), the after counts
// are binomial with log-odds log(θρ·eb/ea) and log(θ·ed/ec), where θ is the
// control's (unknown) change and ρ the node's own. Conditioning further on
// b + d removes θ: b then follows Fisher's noncentral hypergeometric
// distribution with odds ψ = ρ·(eb·ec)/(ea·ed). Under H0 (ρ = 1),
// p = P(X ≥ b). As the control grows this becomes the binomial test of
// PoissonRateTest with the before rate scaled by the control's θ.
func RatioOfRates(a uint64, ea float64, b uint64, eb float64, c uint64, ec float64, d uint64, ed float64) RatioOfRatesTest {
	t := RatioOfRatesTest{Theta: 1, Rho: 1, P: 1}
	if ea <= 0 || eb <= 0 || ec <= 0 || ed <= 0 {
		return t
	}
	t.Theta = ratio(float64(d)/ed, float64(c)/ec)
	t.Rho = ratio(ratio(float64(b)/eb, float64(a)/ea), t.Theta)
	t.P = fnchUpperTail(a+b, c+d, b+d, b, (eb*ec)/(ea*ed))
	return t
}

// ratio is x/y, with 0/0 = 1, x/0 = +Inf, ∞/∞ = 1 and x/∞ = 0.
func ratio(x, y float64) float64 {
	switch {
	case y == 0 && x == 0, math.IsInf(y, 1) && math.IsInf(x, 1):
		return 1
	case y == 0:
		return math.Inf(1)
	}
	return x / y
}

// fnchUpperTail returns P(X ≥ x) for Fisher's noncentral hypergeometric
// distribution: X balls of the first colour among t drawn, with n1 of the
// first colour and n2 of the second, and odds psi. The pmf is proportional to
// C(n1, x)·C(n2, t−x)·psiˣ on max(0, t−n2) ≤ x ≤ min(n1, t). The sum starts
// at the mode (closed form) and walks out both ways with the ratio of
// consecutive terms, stopping once terms no longer change it.
func fnchUpperTail(n1, n2, t, x uint64, psi float64) float64 {
	lo := t - min(t, n2)
	hi := min(n1, t)
	switch {
	case x <= lo:
		return 1
	case x > hi:
		return 0
	case psi <= 0:
		return 0
	case math.IsInf(psi, 1):
		return 1
	}
	// The mode: the root of (ψ−1)m² + Bm + C = 0 that lies in the support.
	N := float64(n1 + n2)
	A := psi - 1
	B := float64(n1) + float64(t) - N - (float64(n1)+float64(t)+2)*psi
	C := (float64(n1) + 1) * (float64(t) + 1) * psi
	mode := math.Floor(-2 * C / (B - math.Sqrt(B*B-4*A*C)))
	m := uint64(math.Min(float64(hi), math.Max(float64(lo), mode)))
	f1, f2, ft := float64(n1), float64(n2), float64(t)
	// Terms are relative to the mode's. Above the mode they are kept as logs,
	// so a tail far beyond it (p = 1e-77) is still summed, relative to x's term.
	total, tail := 1.0, 0.0
	if m >= x {
		tail = 1
	}
	lt, lx, rel := 0.0, 0.0, 0.0
	for j := m; j < hi; j++ { // upwards: log P(j+1)/P(j)
		fj := float64(j)
		lt += math.Log((f1 - fj) * (ft - fj) * psi / ((fj + 1) * (f2 - ft + fj + 1)))
		term := math.Exp(lt)
		total += term
		switch {
		case m >= x:
			tail += term
		case j+1 == x:
			lx, rel = lt, 1
		default:
			if j+1 > x {
				rel += math.Exp(lt - lx)
			}
		}
		if j+1 >= x && term <= total*1e-17 && (m >= x || math.Exp(lt-lx) <= rel*1e-17) {
			break
		}
	}
	term := 1.0
	for j := m; j > lo; j-- { // downwards: P(j−1)/P(j)
		fj := float64(j)
		term *= fj * (f2 - ft + fj) / ((f1 - fj + 1) * (ft - fj + 1) * psi)
		total += term
		if j-1 >= x {
			tail += term
		}
		if term <= total*1e-17 {
			break
		}
	}
	if m < x {
		return math.Min(1, math.Exp(lx)*rel/total)
	}
	return math.Min(1, tail/total)
}

// scaleHist multiplies every sample of a log2 histogram by factor ≥ 1: each
// bucket moves up log2(factor) buckets, the fractional part split between
// two neighbours in proportion. The control group's latency change is
// applied to the node's baseline this way before the node's soak is compared
// with it.
func scaleHist(h wire.Log2Histogram, factor float64) wire.Log2Histogram {
	out := newHist()
	if factor <= 1 {
		addHist(&out, h)
		return out
	}
	s := math.Log2(factor)
	k := int(math.Floor(s))
	f := s - float64(k)
	last := len(out.Buckets) - 1
	for i, c := range h.Buckets {
		if c == 0 {
			continue
		}
		up := uint64(math.Round(f * float64(c)))
		out.Buckets[min(i+k, last)] += c - up
		out.Buckets[min(i+k+1, last)] += up
	}
	return out
}
