package health

import (
	"math"
	"testing"
)

// Reference values computed exactly with Python fractions and math.comb:
// sum of C(n1,j)·C(n2,t−j)·ψʲ over j ≥ x, divided by the sum over the support.
func TestFNCHUpperTailExact(t *testing.T) {
	for _, c := range []struct {
		n1, n2, t, x uint64
		psi, want    float64
	}{
		{30, 90, 40, 15, 1, 0.023455765093324192},
		{30, 90, 40, 15, 1.0 / 3, 4.467464284656831e-06},
		{12, 400, 200, 10, 0.5, 0.00035829608175207844},
		{50, 60, 55, 40, 2, 4.146536865476797e-05},
		{5, 5, 5, 3, 1, 0.5},
		{200, 3000, 600, 80, 0.1, 9.056236183182486e-77},
		{100, 1000, 300, 10, 0.1, 0.006655984308573986},
		{10, 10, 5, 0, 1, 1}, // at the bottom of the support
		{10, 10, 5, 6, 1, 0}, // above it
		{10, 2, 8, 6, 1, 1},  // lo = 6
	} {
		got := fnchUpperTail(c.n1, c.n2, c.t, c.x, c.psi)
		if c.want == 0 && got != 0 || c.want != 0 && math.Abs(got-c.want)/c.want > 1e-9 {
			t.Errorf("fnchUpperTail(%d, %d, %d, %d, %g) = %.17g, want %.17g", c.n1, c.n2, c.t, c.x, c.psi, got, c.want)
		}
	}
}

func TestRatioOfRates(t *testing.T) {
	// The node tripled, the control tripled too: nothing of the node's own.
	same := RatioOfRates(100, 600, 150, 300, 400, 600, 600, 300)
	if same.P < 0.3 || math.Abs(same.Theta-3) > 1e-9 || math.Abs(same.Rho-1) > 1e-9 {
		t.Errorf("shared rise: %+v", same)
	}
	// The node tripled, the control stayed: the node's own rise.
	own := RatioOfRates(100, 600, 150, 300, 400, 600, 200, 300)
	if own.P > 1e-6 || math.Abs(own.Rho-3) > 1e-9 {
		t.Errorf("own rise: %+v", own)
	}
	// With a very large steady control the test is the plain rate test.
	big := RatioOfRates(100, 600, 80, 300, 1_000_000, 600, 500_000, 300)
	plain := PoissonRateTest(100, 600, 80, 300)
	if math.Abs(big.P-plain.P) > 0.01*plain.P {
		t.Errorf("large control: p %g, plain rate test p %g", big.P, plain.P)
	}
	if z := RatioOfRates(0, 600, 0, 300, 10, 600, 5, 300); z.P != 1 {
		t.Errorf("no events on the node: p %g, want 1", z.P)
	}
}

func TestScaleHist(t *testing.T) {
	h := newHist()
	h.Buckets[10] = 1000
	got := scaleHist(h, math.Sqrt2) // half a bucket up
	if got.Buckets[10] != 500 || got.Buckets[11] != 500 || got.Total() != 1000 {
		t.Errorf("×√2: %v", got.Buckets[9:13])
	}
	got = scaleHist(h, 4)
	if got.Buckets[12] != 1000 {
		t.Errorf("×4: %v", got.Buckets[10:14])
	}
	if g := scaleHist(h, 0.5); g.Buckets[10] != 1000 {
		t.Errorf("factors below 1 must leave the histogram alone: %v", g.Buckets[8:12])
	}
	if r := GeoMean(scaleHist(h, 3)) / GeoMean(h); math.Abs(r-3) > 0.01 {
		t.Errorf("geometric mean ×%.3f, want ×3", r)
	}
}
