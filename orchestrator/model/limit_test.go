package model

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestLimitReadsCountsAndPercentages(t *testing.T) {
	for _, tc := range []struct {
		in       intstr.IntOrString
		want     Limit
		of       map[int]int // selected nodes → resolved limit
		err, str string
	}{
		{in: intstr.IntOrString{}, want: Nodes(1), of: map[int]int{0: 1, 1000: 1}, str: "1"}, // absent: the CRD's default
		{in: intstr.FromInt32(4), want: Nodes(4), of: map[int]int{2: 4, 1000: 4}, str: "4"},
		{in: intstr.FromString("10%"), want: Limit{Percent: 10}, of: map[int]int{0: 1, 15: 1, 20: 2, 1000: 100, 2005: 200}, str: "10%"},
		{in: intstr.FromString("100%"), want: Limit{Percent: 100}, of: map[int]int{7: 7}, str: "100%"},
		{in: intstr.FromString("1%"), want: Limit{Percent: 1}, of: map[int]int{50: 1, 250: 2}, str: "1%"},
		{in: intstr.FromInt32(-2), err: "-2 must be at least 1"},
		{in: intstr.FromString("0%"), err: `"0%" must be`},
		{in: intstr.FromString("150%"), err: `"150%" must be`},
		{in: intstr.FromString("05%"), err: `"05%" must be`},
		{in: intstr.FromString("ten"), err: `"ten" must be`},
		{in: intstr.FromString("10"), err: `"10" must be`}, // a count is written as a number
	} {
		got, err := parseLimit("spec.maxParallel", tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.HasPrefix(err.Error(), "spec.maxParallel: ") {
				t.Errorf("%s: err %v, want one naming spec.maxParallel with %q", tc.in.String(), err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %+v %v, want %+v", tc.in.String(), got, err, tc.want)
			continue
		}
		if got.String() != tc.str {
			t.Errorf("%s: String %q, want %q", tc.in.String(), got.String(), tc.str)
		}
		for n, want := range tc.of {
			if r := got.Of(n); r != want {
				t.Errorf("%s of %d nodes = %d, want %d", tc.in.String(), n, r, want)
			}
		}
	}
}
