package model

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/intstr"
)

// Limit is spec.maxParallel or spec.maxUnavailable as the planner reads it:
// a number of nodes, or a percentage of the nodes the rollout selects.
type Limit struct {
	// Nodes is the count when Percent is 0.
	Nodes int
	// Percent, from 1 to 100, scales with the selected nodes (Of).
	Percent int
}

// Nodes is a Limit of n nodes.
func Nodes(n int) Limit { return Limit{Nodes: n} }

// Of resolves the limit against the number of selected nodes: a percentage
// rounds down and is at least 1, so a rollout always moves ("10%" of 15
// nodes is 1, of 1,000 is 100).
func (l Limit) Of(selected int) int {
	if l.Percent == 0 {
		return l.Nodes
	}
	return max(1, selected*l.Percent/100)
}

// String is the limit as written: "4" or "10%".
func (l Limit) String() string {
	if l.Percent == 0 {
		return strconv.Itoa(l.Nodes)
	}
	return strconv.Itoa(l.Percent) + "%"
}

// parseLimit reads one of the spec's limits; an absent one (the zero value)
// is 1, the CRD's default.
func parseLimit(field string, v intstr.IntOrString) (Limit, error) {
	if v.Type == intstr.Int {
		if v.IntVal == 0 {
			return Nodes(1), nil // the API server defaults an absent field; an explicit 0 in a file is ValidateRaw's
		}
		if v.IntVal < 1 {
			return Nodes(1), fmt.Errorf("%s: %d must be at least 1", field, v.IntVal)
		}
		return Nodes(int(v.IntVal)), nil
	}
	digits, ok := strings.CutSuffix(v.StrVal, "%")
	n, err := strconv.Atoi(digits)
	if !ok || err != nil || n < 1 || n > 100 || digits != strconv.Itoa(n) {
		return Nodes(1), fmt.Errorf("%s: %q must be a number of nodes of at least 1, or a percentage from 1%% to 100%%", field, v.StrVal)
	}
	return Limit{Percent: n}, nil
}
