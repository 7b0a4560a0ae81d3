package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// planOffline runs `nodewise plan --offline -f <doc> args...` in process and
// returns its stdout, stderr and error.
func planOffline(t *testing.T, doc string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rollout.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	root := newRootCmd("nodewise")
	root.SetArgs(append([]string{"plan", "--offline", "-f", path, "--kubeconfig=/dev/null"}, args...))
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	err = root.ExecuteContext(t.Context())
	return out.String(), errOut.String(), err
}

// Field names are matched as the API server's strict field validation
// matches them: case-sensitive, every unknown field named with its path.
func TestPlanOfflineStrictFieldNames(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"time zone in lower case", goodRollout + "  maintenanceWindows:\n  - {start: '22:00', end: '04:00', timezone: Europe/Berlin}\n",
			`unknown field "spec.maintenanceWindows[0].timezone" (did you mean timeZone?)`},
		{"maxParallel in lower case", strings.Replace(goodRollout, "maxParallel", "maxparallel", 1), `unknown field "spec.maxparallel" (did you mean maxParallel?)`},
		{"a misspelt field", strings.Replace(goodRollout, "maxParallel", "maxParalel", 1), `unknown field "spec.maxParalel"`},
		{"nested, in a second window", goodRollout + "  maintenanceWindows:\n  - {start: '22:00', end: '04:00'}\n  - {start: '10:00', end: '11:00', dayz: [Mon]}\n",
			`unknown field "spec.maintenanceWindows[1].dayz"`},
		{"metadata", strings.Replace(goodRollout, "name: up", "name: up\n  labls: {team: mesh}", 1), `unknown field "metadata.labls"`},
	} {
		out, errOut, err := planOffline(t, tc.doc)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: err %v (stdout %q, stderr %q); want one line with %q", tc.name, err, out, errOut, tc.want)
		}
	}
	// Both problems at once are both named, on one line.
	both := strings.Replace(goodRollout, "maxParallel", "maxparallel", 1) + "  maintenanceWindows:\n  - {start: '22:00', end: '04:00', timezone: UTC}\n"
	if _, _, err := planOffline(t, both); err == nil || !strings.Contains(err.Error(), `"spec.maintenanceWindows[0].timezone"`) || !strings.Contains(err.Error(), `"spec.maxparallel"`) {
		t.Errorf("two unknown fields: %v; want both named", err)
	}
	good := goodRollout + "  maintenanceWindows:\n  - {start: '22:00', end: '04:00', timeZone: Europe/Berlin}\n"
	if out, errOut, err := planOffline(t, good); err != nil || !strings.Contains(out, "valid NodeRollout up") {
		t.Errorf("the same file spelt right: %v %q %q", err, out, errOut)
	}
}

// Overlapping windows and blackouts wholly in the past are warned on
// stderr; the check still passes.
func TestPlanOfflineWarnings(t *testing.T) {
	for _, tc := range []struct {
		name, spec string
		want       []string // on stderr; none: no warning at all
	}{
		{"windows overlapping across time zones", "  maintenanceWindows:\n  - {start: '22:00', end: '23:00', timeZone: Europe/Berlin}\n  - {start: '20:30', end: '21:30'}\n",
			[]string{"Warning: spec.maintenanceWindows[0]", "and spec.maintenanceWindows[1]", "overlap"}},
		{"overnight window overlapping the next day's", "  maintenanceWindows:\n  - {days: [Mon], start: '23:00', end: '01:00'}\n  - {days: [Tue], start: '00:30', end: '02:00'}\n",
			[]string{"spec.maintenanceWindows[0]", "spec.maintenanceWindows[1]", "overlap"}},
		{"blackout in the past", "  blackouts:\n  - {start: '2020-12-24T00:00', end: '2020-12-27T00:00', reason: holidays}\n",
			[]string{"Warning: spec.blackouts[0] (holidays) ended 2020-12-27T00:00:00Z", "in the past"}},
		{"windows on different days", "  maintenanceWindows:\n  - {days: [Mon], start: '10:00', end: '12:00'}\n  - {days: [Tue], start: '10:00', end: '12:00'}\n", nil},
		{"windows that only touch", "  maintenanceWindows:\n  - {start: '10:00', end: '12:00'}\n  - {start: '12:00', end: '13:00'}\n", nil},
		{"blackout in the future", "  blackouts:\n  - {start: '2999-12-24T00:00', end: '2999-12-27T00:00'}\n", nil},
	} {
		out, errOut, err := planOffline(t, goodRollout+tc.spec)
		if err != nil || !strings.Contains(out, "valid NodeRollout up") {
			t.Errorf("%s: %v %q; want the check to pass", tc.name, err, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%s: stderr %q; want %q", tc.name, errOut, w)
			}
		}
		if tc.want == nil && errOut != "" {
			t.Errorf("%s: stderr %q; want no warning", tc.name, errOut)
		}
	}
}

// --nodes N --zones Z plans a synthetic fleet with the online plan's planner.
func TestPlanOfflineSyntheticFleet(t *testing.T) {
	doc := strings.Replace(goodRollout, "[node-1]", "[canary-1]", 1) + "  maintenanceWindows:\n  - {start: '22:00', end: '04:00', timeZone: Europe/Berlin}\n"
	out, errOut, err := planOffline(t, doc, "--nodes", "10", "--zones", "3", "-o", "json")
	if err != nil {
		t.Fatalf("%v %q", err, errOut)
	}
	var r planReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	zones, waves := map[string]int{}, map[int]bool{}
	for _, n := range r.Nodes {
		zones[n.Zone]++
		waves[n.Wave] = true
	}
	// The canary named in the file is one of the ten, in a wave of its
	// own; the nine others ramp 1, 2 up to maxParallel 2, a wave never
	// spanning two zones.
	if len(r.Nodes) != 10 || len(zones) != 3 || r.Nodes[0].Name != "canary-1" || !r.Nodes[0].Canary || r.Estimate == "" {
		t.Errorf("plan: %+v; want 10 nodes over 3 zones, canary-1 first, an estimate", r)
	}
	for z, n := range zones {
		if n < 3 || n > 4 {
			t.Errorf("zone %s holds %d nodes; want 10 spread evenly over 3 (3 or 4)", z, n)
		}
	}
	if len(waves) != 7 { // the canary; 1+2, 2+1, 2+1
		t.Errorf("%d waves; want 7: %+v", len(waves), r.Nodes)
	}

	out, _, err = planOffline(t, doc, "--nodes", "1000", "--zones", "3")
	for _, want := range []string{"synthetic fleet of 1000 nodes in 3 zones", "Maintenance windows: 1", "22:00–04:00 Europe/Berlin", "Estimated end: ", "1000 nodes in "} {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("--nodes 1000 --zones 3: %v; want %q in\n%s", err, want, out)
		}
	}

	// Percentages scale with the synthetic fleet, as with a live one.
	pct := strings.Replace(doc, "maxParallel: 2", "maxParallel: '5%'\n  maxUnavailable: '2%'", 1)
	out, _, err = planOffline(t, pct, "--nodes", "1000", "--zones", "3")
	if want := "maxParallel 5% (50 nodes), maxUnavailable 2% (20 nodes)"; err != nil || !strings.Contains(out, want) {
		t.Errorf("percentages over 1000 nodes: %v; want %q in\n%s", err, want, out)
	}
	out, _, err = planOffline(t, pct, "--nodes", "1000", "--zones", "3", "-o", "json")
	r = planReport{}
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.MaxParallel != 50 || r.MaxUnavailable != 20 {
		t.Errorf("-o json over 1000 nodes: %v maxParallel %d maxUnavailable %d; want 50 and 20", err, r.MaxParallel, r.MaxUnavailable)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--zones", "4", "--nodes", "3"}, "--zones 4 is more than --nodes 3"},
		{[]string{"--nodes", "-1"}, "--nodes must be at least 1"},
		{[]string{"--nodes", "5", "--zones", "0"}, "--zones must be at least 1"},
		{[]string{"--zones", "2"}, "--zones needs --nodes"},
	} {
		if _, _, err := planOffline(t, doc, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v; want %q", tc.args, err, tc.want)
		}
	}
	// Online, the cluster's own nodes are planned: --nodes is refused
	// before any cluster is read.
	root := newRootCmd("nodewise")
	root.SetArgs([]string{"plan", "-f", "/dev/null", "--nodes", "3", "--kubeconfig=/dev/null"})
	root.SetOut(&bytes.Buffer{})
	root.SetErr(&bytes.Buffer{})
	if err := root.ExecuteContext(t.Context()); err == nil || !strings.Contains(err.Error(), "--nodes and --zones need --offline") {
		t.Errorf("--nodes without --offline: %v", err)
	}
}

// A rollout with a conformance gate says in its plan where the Job runs.
func TestPlanOfflineNamesTheConformanceGate(t *testing.T) {
	doc := goodRollout + "  gates:\n    conformance:\n      namespace: qa\n      when: AfterCanary\n      timeout: 5m\n" +
		"      jobTemplate: {spec: {template: {spec: {restartPolicy: Never, containers: [{name: suite, image: 'example.com/suite:1'}]}}}}\n"
	out, errOut, err := planOffline(t, doc, "--nodes", "6", "--zones", "2")
	if err != nil {
		t.Fatalf("%v %q", err, errOut)
	}
	if want := "Conformance: your Job runs in namespace qa before the first node, and again after the canaries before the nodes that follow; a failure or 5m0s without an outcome halts"; !strings.Contains(out, want) {
		t.Errorf("plan does not say where the conformance Job runs (%q):\n%s", want, out)
	}
	if out, _, _ := planOffline(t, goodRollout, "--nodes", "6", "--zones", "2"); strings.Contains(out, "Conformance:") {
		t.Errorf("a rollout without the gate plans one:\n%s", out)
	}
}
