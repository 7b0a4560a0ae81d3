package house

import (
	"slices"
	"sort"
	"strings"
	"testing"
)

// rooms lists, for each package inside orchestrator/, the rooms of
// orchestrator/ its non-test code may import (by path under orchestrator/).
// The root (the reconcile loop and its executor) wires them all; no room
// imports the root, and a new room needs a line here.
var rooms = map[string][]string{
	"model":            {"timewindow"},
	"timewindow":       {}, // maintenance windows and blackouts as spans of time (time zones, DST)
	"metrics":          {},
	"planner":          {"model", "roster", "timewindow"},
	"roster":           {"model"},                        // a rollout's nodes with what its plan reads of each, kept between passes (pure)
	"prepull":          {"model", "nodestep", "swap"},    // the pre-pull pods: made, read and written
	"kuredlock":        {"locks", "model", "observe"},    // writes Kured's lock on its DaemonSet (observe: the API server's clock)
	"status":           {"model", "planner", "standing"}, // what a rollout's status says after a pass (pure)
	"standing":         {"model"},                        // a standing policy across its runs: wake, run history (pure)
	"locks":            {},                               // other maintenance tools' locks: Kured's and SUC's holders, Kured's lock format
	"nodestep":         {"model"},
	"swap":             {"model", "nodestep", "observe"}, // observe: the caches it waits on
	"observe":          {"model"},
	"gate":             {"model", "observe"},                                                                  // observe: the pod cache the readiness gate reads
	"judgegate":        {"gate", "model"},                                                                     // the judge behind the Gate interface
	"drain":            {"model", "nodestep", "observe"},                                                      // the Drain step: evictions, PDBs, drain policy auto
	"worker":           {"gate", "metrics", "model", "nodestep", "observe", "planner", "swap"},                // drives one node through its steps (write: only behind interfaces)
	"write":            {"model", "nodestep", "observe", "planner"},                                           // node and status writes: records, cache waits, the status budget
	"fleet":            {"locks", "model", "nodestep", "observe", "planner", "prepull", "roster", "standing"}, // a pass's read side: observes the fleet and decides the pass, writing nothing
	"promotion":        {"model"},                                                                             // spec.promotion: what the upstream clusters still lack (reads them, writes nothing)
	"preflight":        {"model", "nodestep"},                                                                 // the version-skew check before a node's swap (its halts)
	"nodecond":         {"locks", "model", "nodestep"},                                                        // the node lifecycle conditions (MaintenanceInProgress, DrainInProgress) of the nodes nodewise has out
	"silence":          {},                                                                                    // the Alertmanager silence held over a node while it is out
	"upgradecheck":     {"model"},                                                                             // nodewise precheck's checks before a rollout's first node (reads the cluster, writes nothing)
	"jobgate":          {},                                                                                    // spec.gates.conformance: the user's Job before nodes start
	"internal/fixture": {"model"},                                                                             // the unit tests' fleets, targets and pods
}

// roomViolations applies rooms to the package list.
func roomViolations(pkgs []pkg) []string {
	var bad []string
	for _, p := range pkgs {
		r := rel(p.ImportPath)
		if area(r) != "orchestrator" || r == "orchestrator" {
			continue
		}
		room := strings.TrimPrefix(r, "orchestrator/")
		may, known := rooms[room]
		if !known {
			bad = append(bad, r+": a room of orchestrator/ with no rule (add it to rooms)")
			continue
		}
		for _, i := range p.Imports {
			ri := rel(i)
			switch {
			case ri == "orchestrator":
				bad = append(bad, r+" imports the orchestrator's root (rooms take what they use as arguments)")
			case area(ri) == "orchestrator" && !slices.Contains(may, strings.TrimPrefix(ri, "orchestrator/")):
				bad = append(bad, r+" imports "+ri+"; it may import only "+strings.Join(may, ", "))
			}
		}
	}
	sort.Strings(bad)
	return bad
}

func TestOrchestratorRooms(t *testing.T) {
	pkgs := listPackages(t)
	n := 0
	for _, p := range pkgs {
		if r := rel(p.ImportPath); strings.HasPrefix(r, "orchestrator/") {
			n++
		}
	}
	if n < len(rooms)-1 {
		t.Fatalf("go list shows %d rooms under orchestrator/, want %d: the check below would prove little", n, len(rooms))
	}
	for _, v := range roomViolations(pkgs) {
		t.Error(v)
	}
}

func TestOrchestratorRoomRulesCatch(t *testing.T) {
	m := func(r string) string { return module + "/" + r }
	for _, c := range []struct {
		name string
		p    pkg
		want string
	}{
		{"the model imports the planner", pkg{ImportPath: m("orchestrator/model"), Imports: []string{m("orchestrator/planner")}}, "may import only"},
		{"a room imports the root", pkg{ImportPath: m("orchestrator/swap"), Imports: []string{m("orchestrator")}}, "root"},
		{"a room without a rule", pkg{ImportPath: m("orchestrator/newroom")}, "no rule"},
	} {
		v := roomViolations([]pkg{c.p})
		if len(v) != 1 || !strings.Contains(v[0], c.want) {
			t.Errorf("%s: got %v, want one violation saying %q", c.name, v, c.want)
		}
	}
}
