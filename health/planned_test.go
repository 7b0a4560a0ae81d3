package health

import (
	"testing"
	"time"

	"github.com/nodewise/nodewise/health/wire"
)

func TestMayBeOlderThan(t *testing.T) {
	ages := func(set map[int]uint64) []uint64 {
		a := make([]uint64, len(wire.AgeBucketBoundsSeconds)+1)
		for i, v := range set {
			a[i] = v
		}
		return a
	}
	// Bucket 6 is [15, 20) s, 7 is [20, 25), 8 is [25, 30), 16 is ≥ 3600 s.
	for _, tc := range []struct {
		name   string
		ages   []uint64
		age    time.Duration
		want   uint64
		wantOK bool
	}{
		{"none", ages(nil), 25 * time.Second, 0, true},
		{"just below the default deadline", ages(map[int]uint64{7: 4}), 25 * time.Second, 0, true},
		{"at the default deadline", ages(map[int]uint64{8: 2}), 25 * time.Second, 2, true},
		{"the unbounded last bucket", ages(map[int]uint64{16: 1, 0: 9}), 25 * time.Second, 1, true},
		{"a bucket straddling the age counts whole", ages(map[int]uint64{6: 3}), 17 * time.Second, 3, true},
		{"the bucket below it does not", ages(map[int]uint64{5: 3}), 17 * time.Second, 0, true},
		{"wrong length is unknown", []uint64{1, 2, 3}, 25 * time.Second, 0, false},
		{"missing is unknown", nil, 25 * time.Second, 0, false},
	} {
		got, ok := MayBeOlderThan(tc.ages, tc.age)
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("%s: got %d, %v; want %d, %v", tc.name, got, ok, tc.want, tc.wantOK)
		}
	}
}
