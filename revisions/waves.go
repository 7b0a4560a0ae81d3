package revisions

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// DefaultWaves is canary (the first namespace in tier order), then 5%, 30%, 100%.
func DefaultWaves() []v1alpha1.Wave {
	p := func(n int32) *int32 { return &n }
	return []v1alpha1.Wave{
		{Name: "canary", Percent: p(1)},
		{Name: "5pct", Percent: p(5)},
		{Name: "30pct", Percent: p(30)},
		{Name: "100pct", Percent: p(100)},
	}
}

// DefaultWaypointCanaryWeights are a waypoint canary's steps: 10%, 50%, then every connection.
func DefaultWaypointCanaryWeights() []int32 { return []int32{10, 50, 100} }

// Defaulted fills the spec's defaults (tag, tier label, waves, and a
// waypoints: Only migration's canary weights).
func Defaulted(spec v1alpha1.RevisionMigrationSpec) v1alpha1.RevisionMigrationSpec {
	if spec.Tag == "" {
		spec.Tag = v1alpha1.DefaultMigrationTag
	}
	if spec.TierLabel == "" {
		spec.TierLabel = v1alpha1.DefaultTierLabel
	}
	if len(spec.Waves) == 0 {
		spec.Waves = DefaultWaves()
	}
	if spec.Waypoints == v1alpha1.WaypointsOnly && len(spec.WaypointCanaryWeights) == 0 {
		spec.WaypointCanaryWeights = DefaultWaypointCanaryWeights()
	}
	return spec
}

// ErrInvalidSpec wraps every spec error Validate finds.
var ErrInvalidSpec = errors.New("invalid RevisionMigration")

// Validate checks a spec the way the CRD's schema and CEL rules do, so the
// CLI can say what is wrong before anything is written. Whether revisions
// exist needs the cluster; the controller checks that.
func Validate(spec v1alpha1.RevisionMigrationSpec) error {
	var errs []string
	if spec.From == "" || spec.To == "" {
		errs = append(errs, "from and to are required")
	} else if spec.From == spec.To {
		errs = append(errs, "from and to must be different revisions")
	}
	if spec.Tag == "default" {
		errs = append(errs, "the default tag is not a migration tag: pick another name (default canary)")
	}
	switch spec.Waypoints {
	case "", v1alpha1.WaypointsExclude:
	case v1alpha1.WaypointsOnly:
		if spec.StableTag != "" {
			errs = append(errs, "stableTag hands sidecar namespaces over to a tag: a waypoints: Only migration has none")
		}
	default:
		errs = append(errs, fmt.Sprintf("waypoints %q: want Exclude or Only", spec.Waypoints))
	}
	errs = append(errs, validWeights(spec)...)
	switch st := spec.StableTag; {
	case st == "":
	case st == "default":
		errs = append(errs, "stableTag cannot be the default tag: move it with istiod's Helm defaultRevision or nodewise tag set default")
	case st == spec.From || st == spec.To || st == Defaulted(spec).Tag:
		errs = append(errs, "stableTag must differ from tag, from and to")
	}
	if spec.RateLimit.PodsPerSecond <= 0 {
		errs = append(errs, "rateLimit.podsPerSecond must be greater than 0")
	}
	seen := map[string]bool{}
	lastPct := int32(0)
	for i, w := range spec.Waves {
		switch {
		case w.Name == "":
			errs = append(errs, fmt.Sprintf("waves[%d]: name is required", i))
		case seen[w.Name]:
			errs = append(errs, fmt.Sprintf("waves[%d]: duplicate name %q", i, w.Name))
		}
		seen[w.Name] = true
		if (w.NamespaceSelector == nil) == (w.Percent == nil) {
			errs = append(errs, fmt.Sprintf("wave %q: set exactly one of namespaceSelector or percent", w.Name))
			continue
		}
		if w.Percent != nil {
			if *w.Percent < 1 || *w.Percent > 100 {
				errs = append(errs, fmt.Sprintf("wave %q: percent must be 1..100", w.Name))
			}
			if *w.Percent <= lastPct {
				errs = append(errs, fmt.Sprintf("wave %q: percent waves must strictly increase (%d after %d)", w.Name, *w.Percent, lastPct))
			}
			lastPct = *w.Percent
			continue
		}
		if len(w.NamespaceSelector.MatchLabels) == 0 {
			errs = append(errs, fmt.Sprintf("wave %q: namespaceSelector.matchLabels is empty", w.Name))
		}
		for _, o := range spec.Waves[:i] {
			if o.NamespaceSelector != nil && overlap(o.NamespaceSelector.MatchLabels, w.NamespaceSelector.MatchLabels) {
				errs = append(errs, fmt.Sprintf("waves %q and %q: namespace selectors overlap (no common label key with different values)", o.Name, w.Name))
			}
		}
	}
	if spec.Gates != nil && spec.Gates.Prometheus != nil {
		if _, _, err := builtInOf(spec.Gates.Prometheus); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidSpec, strings.Join(errs, "; "))
	}
	return nil
}

// validWeights checks spec.waypointCanaryWeights as the CRD's rules do.
func validWeights(spec v1alpha1.RevisionMigrationSpec) []string {
	ws := spec.WaypointCanaryWeights
	if len(ws) == 0 {
		return nil
	}
	if spec.Waypoints != v1alpha1.WaypointsOnly {
		return []string{"waypointCanaryWeights is for a waypoints: Only migration"}
	}
	var errs []string
	if len(ws) > 5 {
		errs = append(errs, "waypointCanaryWeights: at most 5 steps")
	}
	for i, w := range ws {
		if w < 1 || w > 100 {
			errs = append(errs, fmt.Sprintf("waypointCanaryWeights[%d]: %d is not a percentage 1..100", i, w))
		}
		if i > 0 && w <= ws[i-1] {
			errs = append(errs, fmt.Sprintf("waypointCanaryWeights must strictly increase (%d after %d)", w, ws[i-1]))
		}
	}
	if ws[len(ws)-1] != 100 {
		errs = append(errs, "waypointCanaryWeights must end at 100 (the canary takes every connection before the primary is promoted)")
	}
	return errs
}

// overlap is true unless a and b name a common key with different values,
// which is the only way two matchLabels selectors are provably disjoint.
func overlap(a, b map[string]v1alpha1.LabelValue) bool {
	for k, v := range a {
		if w, ok := b[k]; ok && w != v {
			return false
		}
	}
	return true
}

// Candidate is an in-scope namespace and its labels.
type Candidate struct {
	Name   string
	Labels map[string]string
}

// Order sorts namespaces by tier (numeric when both are numbers, else by
// string; namespaces without a tier last), then by name.
func Order(nss []Candidate, tierLabel string) {
	sort.SliceStable(nss, func(i, j int) bool {
		ti, oki := nss[i].Labels[tierLabel]
		tj, okj := nss[j].Labels[tierLabel]
		if oki != okj {
			return oki
		}
		if ti != tj {
			ni, e1 := strconv.Atoi(ti)
			nj, e2 := strconv.Atoi(tj)
			if e1 == nil && e2 == nil {
				return ni < nj
			}
			return ti < tj
		}
		return nss[i].Name < nss[j].Name
	})
}

// Resolve fixes each wave's namespaces. Percent waves are cumulative shares
// of the namespaces in tier order (rounded up, and at least one more
// namespace than before while any remain); selector waves
// take the matching namespaces no earlier wave took. Namespaces no wave takes
// are left where they are.
func Resolve(waves []v1alpha1.Wave, tierLabel string, nss []Candidate) []v1alpha1.ResolvedWave {
	ordered := append([]Candidate(nil), nss...)
	Order(ordered, tierLabel)
	taken := map[string]bool{}
	var out []v1alpha1.ResolvedWave
	for _, w := range waves {
		rw := v1alpha1.ResolvedWave{Name: w.Name}
		if w.Percent != nil {
			target := int(math.Ceil(float64(*w.Percent) * float64(len(ordered)) / 100))
			have := len(taken)
			// Every percent wave moves at least one namespace while any remain,
			// so small fleets get no empty waves.
			target = max(target, have+1)
			for _, ns := range ordered {
				if have >= target {
					break
				}
				if !taken[ns.Name] {
					taken[ns.Name] = true
					rw.Namespaces = append(rw.Namespaces, ns.Name)
					have++
				}
			}
		} else {
			for _, ns := range ordered {
				if !taken[ns.Name] && matches(w.NamespaceSelector.MatchLabels, ns.Labels) {
					taken[ns.Name] = true
					rw.Namespaces = append(rw.Namespaces, ns.Name)
				}
			}
		}
		out = append(out, rw)
	}
	return out
}

func matches(sel map[string]v1alpha1.LabelValue, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != string(v) {
			return false
		}
	}
	return true
}
