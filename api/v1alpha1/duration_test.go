package v1alpha1

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestDurationDecodesEveryValue: a spec with a value that is not a duration
// still decodes (so a list holding it decodes), keeps the value as written
// for Err and for writing back, and a good value reads as before.
func TestDurationDecodesEveryValue(t *testing.T) {
	cases := []struct {
		in      string
		want    time.Duration
		invalid bool
	}{
		{`"90s"`, 90 * time.Second, false},
		{`"1h30m"`, 90 * time.Minute, false},
		{`"0"`, 0, false},
		{`"10 minutes"`, 0, true},
		{`"banana"`, 0, true},
		{`"-5m"`, 0, true},
		{`""`, 0, true},
		{`300`, 0, true},
	}
	for _, tc := range cases {
		var spec NodeRolloutSpec
		raw := `{"soak":` + tc.in + `,"maxParallel":2}`
		if err := json.Unmarshal([]byte(raw), &spec); err != nil {
			t.Errorf("%s: decoding failed: %v", tc.in, err)
			continue
		}
		if spec.MaxParallel != intstr.FromInt32(2) {
			t.Errorf("%s: the rest of the spec was not decoded", tc.in)
		}
		if spec.Soak.Duration != tc.want {
			t.Errorf("%s: %s, want %s", tc.in, spec.Soak.Duration, tc.want)
		}
		if err := spec.Soak.Err(); (err != nil) != tc.invalid {
			t.Errorf("%s: Err() = %v, want invalid=%v", tc.in, err, tc.invalid)
		} else if err != nil && !strings.Contains(err.Error(), tc.in) {
			t.Errorf("%s: Err() %q does not quote the value", tc.in, err)
		}
		out, err := json.Marshal(spec.Soak)
		if err != nil {
			t.Fatal(err)
		}
		if tc.invalid && string(out) != tc.in {
			t.Errorf("%s: written back as %s", tc.in, out)
		}
		var back Duration
		_ = json.Unmarshal(out, &back)
		if back.Duration != tc.want {
			t.Errorf("%s: round trip %s", tc.in, back.Duration)
		}
	}
	var absent NodeRolloutSpec
	if err := json.Unmarshal([]byte(`{"soak":null}`), &absent); err != nil || absent.Soak != nil || absent.Soak.Err() != nil {
		t.Errorf("null soak: %v %v", err, absent.Soak)
	}
}
