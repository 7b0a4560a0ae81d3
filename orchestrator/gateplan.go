package orchestrator

import (
	"fmt"
	"strings"
	"time"
)

// ControlNodes returns the control group the judge compares node i of the
// plan with: the nodes of later windows in its zone (not yet swapped and not
// cordoned while it soaks), or, when its zone has none left, the later
// windows' nodes across the cluster. scope says which ("zone a", "the
// cluster"); none are left for the last window.
func ControlNodes(order []PlannedNode, i int) (nodes []string, scope string) {
	me := order[i]
	var zone, cluster []string
	for _, n := range order {
		if n.Window <= me.Window {
			continue
		}
		cluster = append(cluster, n.Name)
		if n.Zone == me.Zone {
			zone = append(zone, n.Name)
		}
	}
	switch {
	case len(zone) > 0:
		return zone, "zone " + orDash(me.Zone)
	case len(cluster) > 0:
		return cluster, fmt.Sprintf("the cluster (zone %s has none left)", orDash(me.Zone))
	}
	return nil, ""
}

// PlannedGate is the gate node i of the plan will get, as `nodewise plan`
// prints it: its baseline and soak, and the control group it is judged against.
func PlannedGate(order []PlannedNode, i int, p Policy) string {
	if p.Soak == 0 || p.Baseline == 0 {
		return fmt.Sprintf("no before/after judgement (baseline %s, soak %s set explicitly)", p.Baseline, p.Soak)
	}
	w := fmt.Sprintf("baseline %s, soak %s", shortDuration(p.Baseline), shortDuration(p.Soak))
	nodes, scope := ControlNodes(order, i)
	if len(nodes) == 0 {
		return w + ", before/after alone (no control nodes left)"
	}
	plural := "s"
	if len(nodes) == 1 {
		plural = ""
	}
	return fmt.Sprintf("%s, against %d control node%s in %s", w, len(nodes), plural, scope)
}

// shortDuration prints 5m rather than 5m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
