package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio/freshness"
	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/promrig"
	"github.com/nodewise/nodewise/test/testkit"
)

// TestLiveGrafanaPanelsReturnData: both Grafana dashboards the chart ships
// (node health, rollouts), every panel queried against a real Prometheus
// that scrapes the real node agents (HTTPS, bearer token, the node label a
// kubernetes-pods job gives them) and the orchestrator's /metrics (its
// NodeRollout controller, judge, RevisionMigration controller, proxy
// inventory and freshness on one registry, as cmd/orchestrator wires them), while a
// sidecar migration runs and then a faulty ztunnel build halts at its
// canary. Template variables are filled as Grafana fills "All": each
// variable's label_values over the run. Every panel must return series;
// the test names each that returns none.
func TestLiveGrafanaPanelsReturnData(t *testing.T) {
	t.Parallel()
	e, mc := liveSidecars(t, "1.28.1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	col, err := inventory.NewCollector(inventory.CollectorConfig{Client: e.c.Client, Registry: e.reg, Log: zap.NewNop(),
		Options: inventory.Options{IstioNamespace: cluster.IstioNamespace}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = col.Run(ctx) }()
	// The revisions controller's freshness metrics, for the Freshness row
	// (observed every few seconds: the run is minutes, not days).
	fresh, err := freshness.NewCollector(freshness.CollectorConfig{Client: e.c.Client, Registry: e.reg, Log: zap.NewNop(),
		Options: inventory.Options{IstioNamespace: cluster.IstioNamespace}, Interval: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = fresh.Run(ctx) }()
	targets := []promrig.Target{{Addr: e.metricsAddr, Labels: map[string]string{"pod": "nodewise-orchestrator-0"}}}
	for _, n := range e.c.Nodes {
		targets = append(targets, promrig.Target{Addr: net.JoinHostPort(n.IP, strconv.Itoa(e.agents.Port)), HTTPS: true,
			CAFile: e.agents.CAFile, TokenFile: e.agents.TokenFile, Labels: map[string]string{"node": n.Name}})
	}
	prom := promrig.Start(t, targets...)
	start := time.Now()

	if _, err := mc.Create(ctx, sidecarMigration("grafana"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rm := waitMigration(t, mc, "grafana", 3*time.Minute, v1alpha1.MigrationHalted, v1alpha1.MigrationSucceeded)
	t.Logf("migration %s: %s", rm.Status.Phase, rm.Status.Reason)
	node := e.faultyBuild(cluster.ZtunnelName, "1.27.4-rst")
	nr := e.run(faultyRollout("rst", node, true), node)
	t.Logf("rollout %s at %s: %s", nr.Status.Phase, node, nr.Status.HaltReason)
	if nr.Status.Phase != v1alpha1.PhaseHalted {
		t.Fatalf("rollout %s, want Halted at %s (the halt panels need one)", nr.Status.Phase, node)
	}
	// A few scrapes of the halted state: at least the two samples of the
	// halt counter that "Halts by reason" (increase) needs. A fixed 5 s
	// sleep missed them once beside a CI run (no series).
	var end time.Time
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		end = time.Now()
		n, err := rangeQuerier{url: prom.URL, start: start, end: end}.series(`count_over_time(nodewise_rollout_halts_total[10m]) >= 2`)
		if err == nil && n > 0 && time.Since(deadline.Add(-time.Minute)) >= 5*time.Second {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus has not scraped the halt counter twice within a minute (%d series, %v)", n, err)
		}
	}
	for _, f := range []string{"deploy/nodeagent/nodewise-node-health.json", "deploy/orchestrator/nodewise-rollouts.json"} {
		d := loadDashboard(t, filepath.Join(testkit.RepoRoot(), f))
		q := rangeQuerier{url: prom.URL, start: start, end: end}
		vars, err := d.fillVariables(q)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		t.Logf("%s: variables %v", f, vars)
		for _, p := range d.allPanels() {
			total := 0
			var counts []string
			for _, tg := range p.Targets {
				expr := substitute(tg.Expr, vars, end.Sub(start))
				if strings.Contains(expr, "$") {
					t.Errorf("%s, panel %q: a variable left unfilled in %s", f, p.Title, expr)
					continue
				}
				n, err := q.series(expr)
				if err != nil {
					t.Errorf("%s, panel %q: %s: %v", f, p.Title, expr, err)
					continue
				}
				total += n
				counts = append(counts, fmt.Sprintf("%s: %d", tg.RefID, n))
			}
			t.Logf("%s, panel %q: %d series (%s)", filepath.Base(f), p.Title, total, strings.Join(counts, ", "))
			if total == 0 {
				t.Errorf("%s: panel %q returned no series", f, p.Title)
			}
		}
	}
}

// grafanaDashboard is the part of a Grafana dashboard's JSON the test reads.
type grafanaDashboard struct {
	Panels     []grafanaPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"` // a string, or {"query": ...}
		} `json:"list"`
	} `json:"templating"`
}

type grafanaPanel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"` // a collapsed row's
}

func loadDashboard(t *testing.T, path string) grafanaDashboard {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(d.allPanels()) == 0 {
		t.Fatalf("%s has no panel with a query", path)
	}
	return d
}

// allPanels are the panels with queries, rows' panels included.
func (d grafanaDashboard) allPanels() []grafanaPanel {
	var out []grafanaPanel
	var walk func([]grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			if len(p.Targets) > 0 {
				out = append(out, p)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

var labelValues = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)

// fillVariables gives each query variable, in order, the value Grafana's
// "All" gives it: every value its label_values query finds over the run,
// as a regex alternation. A variable with no value is an error: every
// panel using it would be empty.
func (d grafanaDashboard) fillVariables(q rangeQuerier) (map[string]string, error) {
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		query, _ := v.Query.(string)
		if m, ok := v.Query.(map[string]any); ok {
			query, _ = m["query"].(string)
		}
		m := labelValues.FindStringSubmatch(strings.TrimSpace(query))
		if m == nil {
			return nil, fmt.Errorf("variable %s: query %q is not label_values(series, label)", v.Name, query)
		}
		values, err := q.labelValues(substitute(m[1], vars, 0), m[2])
		if err != nil {
			return nil, fmt.Errorf("variable %s: %w", v.Name, err)
		}
		if len(values) == 0 {
			return nil, fmt.Errorf("variable %s: %s has no values", v.Name, query)
		}
		for i := range values {
			values[i] = regexp.QuoteMeta(values[i])
		}
		vars[v.Name] = "(" + strings.Join(values, "|") + ")"
	}
	return vars, nil
}

// substitute fills the dashboard's variables and Grafana's own: the rate
// interval (four scrapes of the rig's 1 s, with room) and the range.
func substitute(expr string, vars map[string]string, rng time.Duration) string {
	names := make([]string, 0, len(vars))
	for n := range vars {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return len(names[i]) > len(names[j]) }) // $node before $n
	pairs := []string{"$__rate_interval", "15s", "$__interval", "5s", "$__range", strconv.Itoa(int(rng.Seconds())+1) + "s"}
	for _, n := range names {
		pairs = append(pairs, "${"+n+"}", vars[n], "$"+n, vars[n])
	}
	return strings.NewReplacer(pairs...).Replace(expr)
}

// rangeQuerier queries Prometheus over the run, as a dashboard over that
// time range does.
type rangeQuerier struct {
	url        string
	start, end time.Time
}

func (q rangeQuerier) get(path string, v url.Values, out any) error {
	v.Set("start", strconv.FormatInt(q.start.Unix(), 10))
	v.Set("end", strconv.FormatInt(q.end.Unix()+1, 10))
	resp, err := http.Get(q.url + path + "?" + v.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return fmt.Errorf("%s: %s: %w", path, resp.Status, err)
	}
	if body.Status != "success" {
		return fmt.Errorf("%s: %s", path, body.Error)
	}
	return json.Unmarshal(body.Data, out)
}

// series is the number of series expr returns over the run.
func (q rangeQuerier) series(expr string) (int, error) {
	var data struct {
		Result []json.RawMessage `json:"result"`
	}
	err := q.get("/api/v1/query_range", url.Values{"query": {expr}, "step": {"5"}}, &data)
	return len(data.Result), err
}

// labelValues lists the values of label on the series match selects.
func (q rangeQuerier) labelValues(match, label string) ([]string, error) {
	var values []string
	err := q.get("/api/v1/label/"+label+"/values", url.Values{"match[]": {match}}, &values)
	return values, err
}
