package worker

import (
	"errors"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
)

// TestPrechecksCache: only a pass younger than PrecheckTTL counts; a
// failed, expired, unknown or unkeyed check does not, nor one from the
// future (a clock stepped back).
func TestPrechecksCache(t *testing.T) {
	var c Prechecks
	if !c.begin("pass") || c.begin("pass") {
		t.Fatal("begin: a second check of the same key ran while the first was under way")
	}
	c.end("pass", t0, nil)
	if !c.begin("fail") {
		t.Fatal("begin fail")
	}
	c.end("fail", t0, errors.New("skew"))
	for _, tc := range []struct {
		key  string
		now  time.Time
		want bool
	}{
		{"pass", t0, true},
		{"pass", t0.Add(PrecheckTTL - time.Second), true},
		{"pass", t0.Add(PrecheckTTL), false},
		{"pass", t0.Add(-time.Second), false},
		{"fail", t0, false},
		{"unknown", t0, false},
		{"", t0, false},
	} {
		if got := c.passed(tc.key, tc.now); got != tc.want {
			t.Errorf("passed(%q, t0%+v) = %v, want %v", tc.key, tc.now.Sub(t0), got, tc.want)
		}
	}
	var none *Prechecks
	if none.passed("pass", t0) {
		t.Error("a nil Prechecks passed a check")
	}
	c.end("later", t0.Add(PrecheckTTL), nil)
	if _, kept := c.results["pass"]; kept {
		t.Error("an expired result was kept")
	}
}

// TestPreflightUsesPrecheck: a node pre-checked while the nodes before it
// soaked starts its preflight without a skew check of its own; one whose
// pre-check failed, expired, or saw an older template is checked again.
func TestPreflightUsesPrecheck(t *testing.T) {
	for _, tc := range []struct {
		name   string
		fail   bool          // the pre-check's skew check fails
		later  time.Duration // from the pre-check to the slot
		change bool          // a target's template changes in between
		want   int           // skew checks in the slot
	}{
		{"fresh pass", false, PrecheckTTL / 2, false, 0},
		{"failed", true, 0, false, 1},
		{"expired", false, PrecheckTTL, false, 1},
		{"template changed", false, 0, true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &fixture.Clock{T: t0}
			r := newRig(t, passing(), clk, nil)
			r.Prechecks = &Prechecks{}
			if tc.fail {
				r.world.skew = errors.New("control plane unreadable")
			}
			r.Precheck(t.Context(), r.nr, r.p, node1)
			if n := r.world.skewChecks(); n != 1 {
				t.Fatalf("pre-check made %d skew checks, want 1", n)
			}
			r.world.skew = nil
			clk.T = clk.T.Add(tc.later)
			if tc.change {
				ref := r.p.Targets[0]
				obj, _, _ := r.c.dss.GetByKey(ref.Namespace + "/" + ref.Name)
				ds := obj.(*appsv1.DaemonSet).DeepCopy()
				ds.Generation++
				_ = r.c.dss.Update(ds)
			}
			if err := r.preflightChecks(t.Context(), r.nr, r.p, node1); err != nil {
				t.Fatal(err)
			}
			if got := r.world.skewChecks() - 1; got != tc.want {
				t.Errorf("the slot's preflight made %d skew checks, want %d", got, tc.want)
			}
		})
	}
}
