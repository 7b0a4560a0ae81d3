package skew

import (
	"fmt"
	"sort"
)

// Observation is one data-plane component and the control plane it talks to.
type Observation struct {
	Component Component
	// Subject names the thing: namespace/pod for sidecars, the node for ztunnel
	// and CNI, namespace/gateway for waypoints.
	Subject  string
	Revision string
	Version  Version
	// ControlPlane is the istiod version of Revision. HasControlPlane is false
	// when no istiod serves that revision any more (the proxy is stranded).
	ControlPlane    Version
	HasControlPlane bool
}

// Violation is an observation outside the policy, with the reason in words.
type Violation struct {
	Observation
	Reason string
}

// Check lists every observation outside the policy, sorted by component then subject.
func Check(p Policy, obs []Observation) []Violation {
	var out []Violation
	for _, o := range obs {
		if reason := p.judge(o); reason != "" {
			out = append(out, Violation{Observation: o, Reason: reason})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Component != out[j].Component {
			return out[i].Component < out[j].Component
		}
		return out[i].Subject < out[j].Subject
	})
	return out
}

func (p Policy) judge(o Observation) string {
	r, ok := p[o.Component]
	if !ok {
		return ""
	}
	if !o.HasControlPlane {
		return fmt.Sprintf("%s %s runs revision %q, which no istiod serves", o.Component, o.Version, o.Revision)
	}
	behind := o.Version.MinorsBehind(o.ControlPlane)
	switch {
	case behind < -r.MaxAhead:
		return fmt.Sprintf("%s %s is newer than its control plane %s (allowed: never newer; %s)",
			o.Component, o.Version.MinorString(), o.ControlPlane.MinorString(), r.Source)
	case behind > r.MaxBehind:
		return fmt.Sprintf("%s %s is %d minors behind its control plane %s (allowed: %d; %s)",
			o.Component, o.Version.MinorString(), behind, o.ControlPlane.MinorString(), r.MaxBehind, r.Source)
	}
	return ""
}

// Supports reports whether a control plane at cp supports component c at dp,
// and if not, why.
func (p Policy) Supports(c Component, dp, cp Version) (bool, string) {
	reason := p.judge(Observation{Component: c, Version: dp, ControlPlane: cp, HasControlPlane: true})
	return reason == "", reason
}
