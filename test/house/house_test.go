// Package house checks the shape of the module: which of its packages may
// import which. Imports run one way, from cmd/ down to api/:
//
//	cmd/*                          the binaries; nothing imports them (cmd/internal/*: what they share)
//	orchestrator/*, revisions/*    the two controllers, apart from each other
//	nodeagent                      the node agent (bpf + health/wire, the shapes it serves)
//	health/*                       the judge; of ours, only api (inside it, judge_test.go's judgeRooms)
//	istio/*, leader, bpf, probe    leaves over api (or nothing)
//	clusters                       several clusters read at once: over api and istio
//	podage                         the PodAgePolicy controller, above both wings (their restarts, judge and windows)
//	kubeconfig, buildinfo          leaves: client config loading, the build version
//	deploy/crds                    the embedded CRDs and their offline validator, a leaf
//	api/*                          the CRD types, client and Scheme
//
// sim/* is the simulated cluster and live data plane that `nodewise sim` and
// `nodewise demo` ship: it may import any product package, and only cmd/ and
// test/ import it. test/* holds the rigs and the suites that run on the
// simulator; nothing outside test/ depends on it in non-test code (cmd/ and
// sim/ included), and a product package's own tests never start a cluster
// (those suites live under test/ or with the simulator).
package house

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/nodewise/nodewise"

// allowed lists, for each product area, the areas of ours its (non-test)
// code may import. An area is the first path element under the module
// ("orchestrator" covers orchestrator/judgegate too).
var allowed = map[string][]string{
	"api":          {},
	"bpf":          {},
	"leader":       {},
	"kubeconfig":   {},
	"buildinfo":    {},
	"deploy":       {},
	"probe":        {},
	"istio":        {"api"},
	"health":       {"api"},
	"nodeagent":    {"api", "bpf", "health", "istio", "agentpki"},    // agentpki: the agent's own credentials (its flood test reviews tokens through it)
	"orchestrator": {"api", "clusters", "health", "istio", "leader"}, // clusters: spec.promotion's upstream reads
	"revisions":    {"api", "clusters", "health", "istio", "leader"}, // clusters: spec.promotion's upstream reads
	"agentpki":     {},                                               // the agents' credentials: Kubernetes only, wired by cmd
	"notify":       {"api"},
	"dashboard":    {"api", "clusters", "health", "istio", "orchestrator"},            // a view of both wings' objects; orchestrator for its annotation keys only; health for health/wire's agent history it plots; clusters for the /clusters page; istio for the /freshness page (istio/freshness)
	"hack":         {},                                                                // build helpers (the pause image's binary)
	"clusters":     {"api", "istio"},                                                  // several clusters read at once (nodewise fleet)
	"podage":       {"api", "health", "istio", "notify", "orchestrator", "revisions"}, // the PodAgePolicy controller, above both wings: orchestrator for its timewindow room only, revisions for its restarts and wave judge
}

type pkg struct {
	ImportPath   string
	Imports      []string
	Deps         []string
	TestImports  []string
	XTestImports []string
}

// rel is the path inside the module ("" for a package outside it).
func rel(path string) string {
	if path == module {
		return "."
	}
	if r, ok := strings.CutPrefix(path, module+"/"); ok {
		return r
	}
	return ""
}

func area(r string) string { a, _, _ := strings.Cut(r, "/"); return a }

// listPackages runs `go list -json` over the module.
func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decoding go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// violations applies the house rules to the package list and returns one
// line per import that breaks them.
func violations(pkgs []pkg) []string {
	var bad []string
	add := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	clusterBound := map[string]bool{} // sim/cluster and every package built on it
	for _, p := range pkgs {
		r := rel(p.ImportPath)
		for _, d := range append([]string{p.ImportPath}, p.Deps...) {
			if rel(d) == "sim/cluster" {
				clusterBound[r] = true
			}
		}
	}
	for _, p := range pkgs {
		r := rel(p.ImportPath)
		a := area(r)
		ours := func(list []string) []string {
			var o []string
			for _, i := range list {
				if ri := rel(i); ri != "" {
					o = append(o, ri)
				}
			}
			return o
		}
		imports, testImports := ours(p.Imports), ours(append(append([]string(nil), p.TestImports...), p.XTestImports...))
		for _, i := range append(append([]string(nil), imports...), testImports...) {
			if area(i) == "cmd" && i != r && !strings.HasPrefix(i, "cmd/internal/") { // cmd/internal: helpers only the binaries share
				add("%s imports %s: nothing imports a binary", r, i)
			}
		}
		if a == "test" {
			continue // the test tree may import anything but a binary
		}
		for _, d := range ours(p.Deps) {
			if area(d) == "test" {
				add("%s depends on %s: product code never depends on test/", r, d)
			}
		}
		if a == "cmd" || a == "sim" {
			continue // the binaries and the simulator may import any product package
		}
		want, ok := allowed[a]
		if !ok {
			add("%s: area %q has no rule in the house test; add one", r, a)
			continue
		}
		for _, i := range imports {
			ai := area(i)
			if ai == a {
				continue
			}
			if ai == "test" {
				add("%s imports %s: product code never imports test/", r, i)
				continue
			}
			if ai == "sim" {
				add("%s imports %s: only cmd/ and test/ import the simulator (sim/)", r, i)
				continue
			}
			found := false
			for _, w := range want {
				found = found || w == ai
			}
			if !found {
				add("%s imports %s: %s may import only %v of ours", r, i, a, want)
			}
		}
		for _, i := range testImports {
			switch ai := area(i); {
			case (ai == "test" || ai == "sim") && clusterBound[i]:
				add("%s's tests import %s: a suite that starts a cluster lives under test/", r, i)
			case ai != a && ai != "test" && ai != "sim" && !contains(want, ai):
				add("%s's tests import %s: %s may import only %v of ours", r, i, a, want)
			}
		}
	}
	sort.Strings(bad)
	return bad
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

// TestHouse: imports run one way (see the package comment).
func TestHouse(t *testing.T) {
	pkgs := listPackages(t)
	seen := map[string]bool{}
	for _, p := range pkgs {
		seen[rel(p.ImportPath)] = true
	}
	// The rules are only as good as the list they read.
	for _, must := range []string{"api/v1alpha1", "health", "orchestrator", "orchestrator/judgegate", "revisions", "istio", "leader", "bpf", "nodeagent", "cmd/nodewise", "sim/cluster"} {
		if !seen[must] {
			t.Fatalf("go list did not report %s: the house test reads the wrong module", must)
		}
	}
	for _, v := range violations(pkgs) {
		t.Error(v)
	}
}

// TestHouseRulesCatch: each rule fires on a package list that breaks it.
func TestHouseRulesCatch(t *testing.T) {
	m := func(r string) string { return module + "/" + r }
	for _, tc := range []struct {
		name string
		p    pkg
		want string
	}{
		{"health imports the orchestrator", pkg{ImportPath: m("health"), Imports: []string{m("orchestrator")}}, "health may import only [api]"},
		{"health imports the sidecar wing", pkg{ImportPath: m("health/gatespec"), Imports: []string{m("revisions")}}, "health may import only [api]"},
		{"orchestrator imports revisions", pkg{ImportPath: m("orchestrator"), Imports: []string{m("revisions/revtag")}}, "orchestrator may import only"},
		{"revisions imports orchestrator", pkg{ImportPath: m("revisions"), Imports: []string{m("orchestrator")}}, "revisions may import only"},
		{"orchestrator imports the agent", pkg{ImportPath: m("orchestrator/judgegate"), Imports: []string{m("nodeagent")}}, "orchestrator may import only"},
		{"orchestrator imports bpf", pkg{ImportPath: m("orchestrator"), Imports: []string{m("bpf")}}, "orchestrator may import only"},
		{"api imports health", pkg{ImportPath: m("api/v1alpha1"), Imports: []string{m("health")}}, "api may import only []"},
		{"istio imports orchestrator", pkg{ImportPath: m("istio/skew"), Imports: []string{m("orchestrator")}}, "istio may import only [api]"},
		{"product imports test", pkg{ImportPath: m("leader"), Imports: []string{m("test/netrig")}}, "never imports test/"},
		{"product depends on test", pkg{ImportPath: m("health"), Deps: []string{m("test/netrig")}}, "never depends on test/"},
		{"a binary depends on test", pkg{ImportPath: m("cmd/nodewise"), Deps: []string{m("test/chart")}}, "never depends on test/"},
		{"the simulator depends on test", pkg{ImportPath: m("sim/demo"), Deps: []string{m("test/browser")}}, "never depends on test/"},
		{"product imports sim", pkg{ImportPath: m("orchestrator"), Imports: []string{m("sim/simpki")}}, "only cmd/ and test/ import the simulator"},
		{"cluster suite in a product package", pkg{ImportPath: m("health"), XTestImports: []string{m("sim/cluster")}}, "lives under test/"},
		{"a binary imported", pkg{ImportPath: m("test/e2e"), TestImports: []string{m("cmd/nodewise")}}, "nothing imports a binary"},
		{"a new area", pkg{ImportPath: m("sidecar")}, "has no rule"},
	} {
		got := strings.Join(violations([]pkg{tc.p, {ImportPath: m("sim/cluster")}}), "\n")
		if !strings.Contains(got, tc.want) {
			t.Errorf("%s: violations %q, want one containing %q", tc.name, got, tc.want)
		}
	}
	if v := violations([]pkg{{ImportPath: m("orchestrator"), Imports: []string{m("api/v1alpha1"), m("health"), m("istio/skew"), m("leader"), m("orchestrator/judgegate")}}}); len(v) != 0 {
		t.Errorf("allowed imports flagged: %v", v)
	}
}
