package skew

import (
	"errors"
	"fmt"
)

// ErrDowngrade is returned when a plan's target is older than where it starts.
var ErrDowngrade = errors.New("target is older than the current version")

// Pass is one fleet-wide move: install istiod To beside From, move every
// namespace, restart every proxy. Why says why the pass exists.
type Pass struct {
	From, To Version
	Why      string
}

// Plan splits a move of sidecar proxies from oldest (the oldest proxy in the
// fleet) to target into passes the policy supports: each pass may put the
// control plane at most MaxBehind minors ahead of the proxies it leaves behind.
// n-2 -> n under the default policy is two passes.
func Plan(p Policy, oldest, target Version) ([]Pass, error) {
	if oldest.Major != target.Major {
		return nil, fmt.Errorf("planning %s -> %s: major version changes are not planned", oldest, target)
	}
	if target.Minor < oldest.Minor {
		return nil, fmt.Errorf("planning %s -> %s: %w", oldest, target, ErrDowngrade)
	}
	step := p[Sidecar].MaxBehind
	if step < 1 {
		step = 1
	}
	var passes []Pass
	cur := Version{Major: oldest.Major, Minor: oldest.Minor, Patch: -1}
	total := target.Minor - oldest.Minor
	for cur.Minor < target.Minor {
		next := Version{Major: cur.Major, Minor: min(cur.Minor+step, target.Minor), Patch: -1}
		if next.Minor == target.Minor {
			next = target
		}
		why := fmt.Sprintf("move every proxy from %s to %s", cur.MinorString(), next.MinorString())
		if total > step && len(passes) == 0 {
			why += fmt.Sprintf(": istiod %s supports proxies at most %d minor(s) older (%s), so proxies still on %s must reach %s before %s is installed",
				target.MinorString(), p[Sidecar].MaxBehind, p[Sidecar].Source, oldest.MinorString(),
				Version{Major: target.Major, Minor: target.Minor - step}.MinorString(), target.MinorString())
		}
		if len(passes) > 0 {
			why += fmt.Sprintf(": with every proxy on %s, istiod %s is within the supported skew", cur.MinorString(), next.MinorString())
		}
		passes = append(passes, Pass{From: cur, To: next, Why: why})
		cur = next
	}
	return passes, nil
}

// CheckControlPlaneMove refuses to put a control plane at target while any of
// proxies would fall outside the policy, naming the oldest stranded proxy.
func CheckControlPlaneMove(p Policy, proxies []Observation, target Version) error {
	var worst *Observation
	for i := range proxies {
		o := proxies[i]
		if ok, _ := p.Supports(o.Component, o.Version, target); ok {
			continue
		}
		if worst == nil || o.Version.Less(worst.Version) {
			worst = &proxies[i]
		}
	}
	if worst == nil {
		return nil
	}
	_, why := p.Supports(worst.Component, worst.Version, target)
	passes, err := Plan(p, worst.Version, target)
	if err != nil {
		return fmt.Errorf("control plane %s would strand %s: %s", target.MinorString(), worst.Subject, why)
	}
	return fmt.Errorf("control plane %s would strand %s: %s; plan %d passes instead (first: %s -> %s)",
		target.MinorString(), worst.Subject, why, len(passes), passes[0].From.MinorString(), passes[0].To.MinorString())
}
