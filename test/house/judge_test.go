package house

import (
	"slices"
	"sort"
	"strings"
	"testing"
)

// judgeRooms lists, for each package under health/ (by path under health/,
// "" for the judge itself), the packages of health/ its non-test code may
// import. The judge (statistics and verdicts) imports none of the clients
// that feed it; wire, the shapes the node agent serves, imports nothing of
// health/ (and of the module at most api, which the area rule holds it to).
var judgeRooms = map[string][]string{
	"wire":             {},
	"":                 {"wire"},               // the judge: statistics, windows, verdicts
	"remote":           {"wire"},               // the agent and Prometheus clients, their transport, the gate address policy
	"remote/agenttest": {"wire"},               // a node agent's snapshot API served for tests
	"record":           {"", "wire"},           // the sample recorder, clock placement, the persisted records' codecs
	"gatespec":         {"", "remote", "wire"}, // NodeRollout spec.gates to the judge's Config and the gates
	"conformance":      {},                     // spec.gates.conformance: the user's Job, run and judged
}

// agentSees is what of health/ the node agent's non-test code may import:
// the wire shapes it serves, nothing of the judge or its clients.
var agentSees = []string{"health/wire"}

// judgeViolations applies judgeRooms and agentSees to the package list.
func judgeViolations(pkgs []pkg) []string {
	var bad []string
	for _, p := range pkgs {
		r := rel(p.ImportPath)
		switch {
		case area(r) == "health":
			room := strings.TrimPrefix(strings.TrimPrefix(r, "health"), "/")
			may, known := judgeRooms[room]
			if !known {
				bad = append(bad, r+": a package of health/ with no rule (add it to judgeRooms)")
				continue
			}
			for _, i := range p.Imports {
				ri := rel(i)
				if area(ri) != "health" {
					continue
				}
				if in := strings.TrimPrefix(strings.TrimPrefix(ri, "health"), "/"); !slices.Contains(may, in) {
					bad = append(bad, r+" imports "+ri+"; it may import only "+strings.Join(may, ", ")+" of health/")
				}
			}
		case area(r) == "nodeagent":
			for _, i := range p.Imports {
				if ri := rel(i); area(ri) == "health" && !slices.Contains(agentSees, ri) {
					bad = append(bad, r+" imports "+ri+"; the agent shares only "+strings.Join(agentSees, ", ")+" with the judge")
				}
			}
		}
	}
	sort.Strings(bad)
	return bad
}

// TestJudgeApartFromItsClients: the judge, its clients, the recorder and
// the wire shapes import one another one way (judgeRooms).
func TestJudgeApartFromItsClients(t *testing.T) {
	pkgs := listPackages(t)
	seen := map[string]bool{}
	for _, p := range pkgs {
		seen[rel(p.ImportPath)] = true
	}
	for _, must := range []string{"health", "health/wire", "health/remote", "health/record", "nodeagent"} {
		if !seen[must] {
			t.Fatalf("go list did not report %s: the check below would prove little", must)
		}
	}
	for _, v := range judgeViolations(pkgs) {
		t.Error(v)
	}
}

func TestJudgeRoomRulesCatch(t *testing.T) {
	m := func(r string) string { return module + "/" + r }
	for _, c := range []struct {
		name string
		p    pkg
		want string
	}{
		{"the judge imports a client", pkg{ImportPath: m("health"), Imports: []string{m("health/remote")}}, "may import only wire"},
		{"the judge imports the recorder", pkg{ImportPath: m("health"), Imports: []string{m("health/record")}}, "may import only wire"},
		{"wire imports the judge", pkg{ImportPath: m("health/wire"), Imports: []string{m("health")}}, "may import only"},
		{"a client imports the judge", pkg{ImportPath: m("health/remote"), Imports: []string{m("health")}}, "may import only wire"},
		{"the agent imports the judge", pkg{ImportPath: m("nodeagent"), Imports: []string{m("health")}}, "shares only health/wire"},
		{"the agent imports a client", pkg{ImportPath: m("nodeagent"), Imports: []string{m("health/remote")}}, "shares only health/wire"},
		{"a package without a rule", pkg{ImportPath: m("health/newroom")}, "no rule"},
	} {
		v := judgeViolations([]pkg{c.p})
		if len(v) != 1 || !strings.Contains(v[0], c.want) {
			t.Errorf("%s: got %v, want one violation saying %q", c.name, v, c.want)
		}
	}
	if v := judgeViolations([]pkg{{ImportPath: m("nodeagent"), Imports: []string{m("health/wire"), m("bpf")}}, {ImportPath: m("health/record"), Imports: []string{m("health"), m("health/wire")}}}); len(v) != 0 {
		t.Errorf("allowed imports flagged: %v", v)
	}
}
