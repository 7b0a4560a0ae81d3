package skew

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Component is a data-plane component the policy constrains.
type Component string

const (
	// Sidecar is an injected istio-proxy, bound to the istiod of its revision.
	Sidecar Component = "sidecar"
	// Ztunnel is the ambient node proxy.
	Ztunnel Component = "ztunnel"
	// CNI is the istio-cni node agent.
	CNI Component = "istio-cni"
	// Waypoint is an ambient waypoint's Envoy, bound to the istiod of its
	// Gateway's revision.
	Waypoint Component = "waypoint"
)

// Rule bounds how far a component may drift from its control plane, in minor
// releases. MaxBehind 1 means the data plane may run 1.27 under istiod 1.28;
// MaxAhead 0 means it may never be newer than istiod.
type Rule struct {
	Component Component
	MaxBehind int
	MaxAhead  int
	// Source is where the number comes from, printed with every violation.
	Source string
}

// Policy is the skew table, one rule per component.
type Policy map[Component]Rule

// DefaultPolicy is Istio's published support policy:
//
//	| component | behind istiod | ahead of istiod | source |
//	|-----------|---------------|-----------------|--------|
//	| sidecar   | 1 minor       | never           | istio.io/latest/docs/releases/supported-releases ("Control Plane/Data Plane Skew") |
//	| ztunnel   | 1 minor       | never           | ambient upgrade guide: ztunnel 1.x works with istiod 1.x and 1.x+1 |
//	| istio-cni | 1 minor       | never           | CNI upgrade notes; Istio also tolerates CNI one minor ahead, we do not (data plane never newer) |
//	| waypoint  | 1 minor       | never           | supported-releases: a waypoint is an Envoy proxy, under the same data-plane skew as a sidecar |
//
// Override it with Policy.Override ("sidecar=2" and so on) when a vendor's
// support statement is wider.
func DefaultPolicy() Policy {
	const sup = "istio.io/latest/docs/releases/supported-releases#control-planedata-plane-skew"
	return Policy{
		Sidecar:  {Component: Sidecar, MaxBehind: 1, MaxAhead: 0, Source: sup},
		Ztunnel:  {Component: Ztunnel, MaxBehind: 1, MaxAhead: 0, Source: "istio.io/latest/docs/ambient/upgrade (ztunnel at istiod's minor or one behind)"},
		CNI:      {Component: CNI, MaxBehind: 1, MaxAhead: 0, Source: "istio.io/latest/docs/setup/additional-setup/cni#upgrade (CNI at istiod's minor or one behind)"},
		Waypoint: {Component: Waypoint, MaxBehind: 1, MaxAhead: 0, Source: sup + " (a waypoint is an Envoy proxy of its Gateway's revision)"},
	}
}

// Override returns a copy of p with rules changed by "component=maxBehind"
// entries (e.g. "sidecar=2"). An unknown component or a negative or
// non-numeric bound is an error naming the allowed values.
func (p Policy) Override(entries []string) (Policy, error) {
	out := Policy{}
	for k, v := range p {
		out[k] = v
	}
	for _, e := range entries {
		name, val, ok := strings.Cut(e, "=")
		if !ok {
			return nil, fmt.Errorf("skew override %q: want component=maxMinorsBehind (e.g. sidecar=2)", e)
		}
		r, known := out[Component(name)]
		if !known {
			return nil, fmt.Errorf("skew override %q: unknown component %q (allowed: %s)", e, name, strings.Join(p.components(), ", "))
		}
		n, err := strconv.Atoi(val)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("skew override %q: maxMinorsBehind must be a whole number >= 0", e)
		}
		r.MaxBehind = n
		r.Source = "override " + e
		out[Component(name)] = r
	}
	return out, nil
}

func (p Policy) components() []string {
	var names []string
	for c := range p {
		names = append(names, string(c))
	}
	sort.Strings(names)
	return names
}

// Rules lists the table in a stable order, for printing.
func (p Policy) Rules() []Rule {
	var rs []Rule
	for _, c := range p.components() {
		rs = append(rs, p[Component(c)])
	}
	return rs
}
