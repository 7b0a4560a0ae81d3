package v1alpha1

import (
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a span written as a Go duration string, such as "90s", "5m" or
// "1h30m". The CRD refuses any other string. An object written around that
// check (by an older CRD, or straight into etcd) still decodes: the value is
// kept as written and Err reports it, so one bad object costs only its own
// rollout, with a condition saying why, and never the cache every rollout is
// read from.
//
// +kubebuilder:validation:Type=string
// +kubebuilder:validation:MaxLength=32
// +kubebuilder:validation:XValidation:rule="self.matches('^(0|(([0-9]+[.]?[0-9]*|[.][0-9]+)(ns|us|µs|ms|s|m|h))+)$')",message="must be a duration such as 30s, 5m or 1h30m (units ns, us, ms, s, m, h; no spaces, no sign)"
type Duration struct {
	Duration time.Duration `json:"-"`
	// invalid is the value as written when it is not a duration.
	invalid string
}

// Err says why the value as written is not a duration, or nil.
func (d *Duration) Err() error {
	if d == nil || d.invalid == "" {
		return nil
	}
	return fmt.Errorf("%s is not a duration such as 30s, 5m or 1h30m", d.invalid)
}

// UnmarshalJSON reads a duration string. It never fails: a value that is not
// one is kept for Err (and written back as it was).
func (d *Duration) UnmarshalJSON(b []byte) error {
	*d = Duration{}
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		if pd, err := time.ParseDuration(s); err == nil && pd >= 0 {
			d.Duration = pd
			return nil
		}
	}
	d.invalid = string(b) // the raw JSON, quotes and all
	return nil
}

// MarshalJSON writes the duration string, or the value as it was read if it
// was not a duration.
func (d Duration) MarshalJSON() ([]byte, error) {
	if d.invalid != "" {
		return []byte(d.invalid), nil
	}
	return json.Marshal(d.Duration.String())
}

// DurationOf is a valid Duration of d, for code that builds specs.
func DurationOf(d time.Duration) *Duration { return &Duration{Duration: d} }
