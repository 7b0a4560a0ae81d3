package health

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/nodewise/nodewise/health/wire"
)

func near(got, want, rel float64) bool {
	if want == 0 {
		return math.Abs(got) < 1e-12
	}
	return math.Abs(got-want)/math.Abs(want) <= rel
}

// Reference values computed exactly (Python fractions and math.comb).
func TestBinomUpperTail(t *testing.T) {
	for _, c := range []struct {
		n, k uint64
		p    float64
		want float64
	}{
		{10, 8, 0.5, 0.0546875},
		{20, 3, 0.1, 0.323073194810534},
		{40, 30, 0.5, 0.0011107168866146822},
		{30, 25, 2.0 / 3, 0.03545417181629901},
		{1000, 130, 0.1, 0.001341398370873429},
		{10, 0, 0.3, 1},
		{10, 11, 0.3, 0},
		{5, 5, 0.5, 1.0 / 32},
	} {
		if got := binomUpperTail(c.n, c.k, c.p); !near(got, c.want, 1e-9) {
			t.Errorf("P(Binom(%d,%g) ≥ %d) = %.15g, want %.15g", c.n, c.p, c.k, got, c.want)
		}
	}
}

func TestPoissonRateTest(t *testing.T) {
	// 5 events in 600 s, then 12 in 300 s: q = 1/3, P(Binom(17, 1/3) ≥ 12).
	r := PoissonRateTest(5, 600, 12, 300)
	if !near(r.P, 0.0018748234040869222, 1e-9) {
		t.Errorf("p = %g, want 0.0018748", r.P)
	}
	if !near(r.Ratio(), 4.8, 1e-12) {
		t.Errorf("ratio = %g, want 4.8", r.Ratio())
	}
	// A fall in rate is never significant in the one-sided test.
	if r := PoissonRateTest(50, 300, 10, 300); r.P < 0.99 {
		t.Errorf("rate fell but p = %g", r.P)
	}
	// Equal counts over equal windows: p ≈ 0.5 + P(X = k)/2, well above any α.
	if r := PoissonRateTest(100, 300, 100, 300); r.P < 0.5 || r.P > 0.6 {
		t.Errorf("equal rates p = %g, want in [0.5, 0.6]", r.P)
	}
	if r := PoissonRateTest(0, 300, 5, 300); !math.IsInf(r.Ratio(), 1) || !near(r.P, 1.0/32, 1e-9) {
		t.Errorf("0 → 5: ratio %g p %g, want +Inf and 1/32", r.Ratio(), r.P)
	}
}

func hist(b map[int]uint64) wire.Log2Histogram {
	h := newHist()
	for i, v := range b {
		h.Buckets[i] = v
	}
	return h
}

func TestMannWhitney(t *testing.T) {
	// Reference: brute-force pair counting with ties in Python.
	r := MannWhitney(hist(map[int]uint64{3: 2, 4: 3, 5: 1}), hist(map[int]uint64{4: 1, 5: 3, 6: 2}))
	if r.U != 32 || !near(r.Z, 2.25, 1e-12) || !near(r.P, 0.012224472655044704, 1e-9) {
		t.Errorf("U=%g z=%g p=%g, want U=32 z=2.25 p=0.0122245", r.U, r.Z, r.P)
	}
	// Reversed: the after sample is smaller, so p is large.
	if r := MannWhitney(hist(map[int]uint64{4: 1, 5: 3, 6: 2}), hist(map[int]uint64{3: 2, 4: 3, 5: 1})); r.P < 0.98 {
		t.Errorf("shift down p = %g, want ≥ 0.98", r.P)
	}
	// All in one bucket: zero variance, no evidence.
	if r := MannWhitney(hist(map[int]uint64{7: 50}), hist(map[int]uint64{7: 80})); r.P != 1 {
		t.Errorf("all tied p = %g, want 1", r.P)
	}
	if r := MannWhitney(newHist(), hist(map[int]uint64{7: 80})); r.P != 1 {
		t.Errorf("empty before p = %g, want 1", r.P)
	}
}

func TestHolm(t *testing.T) {
	got := Holm([]float64{0.01, 0.04, 0.03, 0.005})
	want := []float64{0.03, 0.06, 0.06, 0.02}
	for i := range want {
		if !near(got[i], want[i], 1e-12) {
			t.Fatalf("Holm = %v, want %v", got, want)
		}
	}
	if got := Holm([]float64{0.9, 0.8}); got[0] != 1 || got[1] != 1 {
		t.Errorf("Holm caps at 1: %v", got)
	}
}

func TestQuantile(t *testing.T) {
	h := hist(map[int]uint64{10: 100})
	if q := h.Quantile(0.5); !near(q, 1024*math.Sqrt2, 1e-12) {
		t.Errorf("p50 = %g, want 1024·√2", q)
	}
	h = hist(map[int]uint64{0: 50, 3: 50})
	if q := h.Quantile(0.25); q != 1 {
		t.Errorf("p25 = %g, want 1", q)
	}
	if q := h.Quantile(0.99); !near(q, 8*math.Pow(2, 0.98), 1e-12) {
		t.Errorf("p99 = %g, want 8·2^0.98", q)
	}
	// Inside a bucket, the log of the tail beyond is linear in log x:
	// S(2048) = 100, S(4096) = 10, S = 50 at 2048·2^(ln 0.5 / ln 0.1).
	h = hist(map[int]uint64{10: 900, 11: 90, 12: 10})
	if q := h.Quantile(0.95); !near(q, 2048*math.Pow(2, math.Log(0.5)/math.Log(0.1)), 1e-12) {
		t.Errorf("p95 = %g, want 2523.6", q)
	}
	// Below the median the CDF plays that role: F(2048) = 10, F(4096) = 100, F = 50.
	h = hist(map[int]uint64{10: 10, 11: 90, 12: 900})
	if q := h.Quantile(0.05); !near(q, math.Exp2(11+math.Log(5)/math.Log(10)), 1e-12) {
		t.Errorf("p5 = %g, want 3324.2", q)
	}
	if q := newHist().Quantile(0.5); q != 0 {
		t.Errorf("empty p50 = %g", q)
	}
}

func TestGeoMean(t *testing.T) {
	// Half at bucket 3 (centre 2^3.5), half at bucket 5 (2^5.5): mean log2 = 4.5.
	if g := GeoMean(hist(map[int]uint64{3: 10, 5: 10})); !near(g, math.Exp2(4.5), 1e-12) {
		t.Errorf("geomean = %g, want 2^4.5", g)
	}
	if g := GeoMean(hist(map[int]uint64{0: 4})); g != 1 {
		t.Errorf("bucket 0 geomean = %g, want 1", g)
	}
	if g := GeoMean(newHist()); g != 0 {
		t.Errorf("empty geomean = %g", g)
	}
}

// TestLogMedianReadsAShiftUnblurred: a ×1.3 slowdown of a narrow lognormal
// (σ 0.2, under a third of a log2 bucket) reads ×1.3 from the fitted medians, where
// the bucket centres read it anywhere from ×1 to ×2 by where the median sits.
func TestLogMedianReadsAShiftUnblurred(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	var worst, worstGeo float64
	for _, median := range []float64{300, 400, 550, 700, 1000} {
		b, a := newHist(), newHist()
		lognormalHist(r, b.Buckets, 5000, median, 0.2)
		lognormalHist(r, a.Buckets, 5000, median*1.3, 0.2)
		mb, _ := LogMedian(b)
		ma, _ := LogMedian(a)
		got, geo := math.Exp2(ma-mb), GeoMean(a)/GeoMean(b)
		worst, worstGeo = math.Max(worst, math.Abs(got-1.3)), math.Max(worstGeo, math.Abs(geo-1.3))
		if d := math.Abs(math.Exp2(mb) - median); d > 0.05*median {
			t.Errorf("median %g: fitted %g", median, math.Exp2(mb))
		}
	}
	t.Logf("×1.3 read within ±%.3f fitted, ±%.3f from bucket centres", worst, worstGeo)
	if worst > 0.04 {
		t.Errorf("a ×1.3 shift read up to %.3f off (the bucket centres: %.3f)", worst, worstGeo)
	}
	if _, ok := LogMedian(newHist()); ok {
		t.Error("an empty histogram has no median")
	}
}

// logLik's gradient and Hessian are its own finite differences.
func TestLogLikDerivatives(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	h := newHist()
	lognormalHist(r, h.Buckets, 3000, 700, 0.4)
	const d = 1e-5
	for _, at := range [][2]float64{{9.3, 0.5}, {9.8, 0.3}, {8.5, 1.2}} {
		mu, s := at[0], at[1]
		_, gm, gs, hmm, hms, hss := logLik(h, mu, s)
		lp, gmp, gsp, _, _, _ := logLik(h, mu+d, s)
		lm, gmm, _, _, _, _ := logLik(h, mu-d, s)
		sp, _, gss, _, _, _ := logLik(h, mu, s+d)
		sm, _, _, _, _, _ := logLik(h, mu, s-d)
		for _, c := range []struct {
			name      string
			got, want float64
		}{
			{"∂μ", gm, (lp - lm) / (2 * d)}, {"∂σ", gs, (sp - sm) / (2 * d)},
			{"∂μμ", hmm, (gmp - gmm) / (2 * d)}, {"∂μσ", hms, (gsp - gs) / d}, {"∂σσ", hss, (gss - gs) / d},
		} {
			if math.Abs(c.got-c.want) > 1e-3*math.Max(1, math.Abs(c.want)) {
				t.Errorf("at μ %g σ %g: %s %g, finite difference %g", mu, s, c.name, c.got, c.want)
			}
		}
	}
}
