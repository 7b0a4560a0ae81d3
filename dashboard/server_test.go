package dashboard

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/test/testkit"
)

type env struct {
	t   *testing.T
	rs  *fakeRollouts
	ms  *fakeMigrations
	srv *httptest.Server
	// printed is the URL with the session's token, as `nodewise dashboard`
	// prints it; client is a person's browser after opening it.
	printed string
	client  *http.Client
}

func newEnv(t *testing.T, readOnly bool, nrs ...*v1alpha1.NodeRollout) *env {
	t.Helper()
	return newEnvWith(t, func(c *Config) { c.ReadOnly = readOnly }, nrs...)
}

// newEnvWith is newEnv with its Config changed by with first.
func newEnvWith(t *testing.T, with func(*Config), nrs ...*v1alpha1.NodeRollout) *env {
	t.Helper()
	e := &env{t: t, rs: newFakeRollouts(nrs...), ms: &fakeMigrations{items: []v1alpha1.RevisionMigration{migration()}}}
	cfg := Config{Rollouts: e.rs, Migrations: e.ms, Token: testToken(t), GrafanaURL: "http://grafana.example:3000/", Now: func() time.Time { return t0.Add(5 * time.Minute) }}
	with(&cfg)
	s := started(t, cfg)
	for !s.hub.migrationsListed() { // Start waits for the rollouts alone
		time.Sleep(10 * time.Millisecond)
	}
	e.srv = httptest.NewServer(s.Handler())
	t.Cleanup(e.srv.Close)
	e.printed = s.URL(strings.TrimPrefix(e.srv.URL, "http://"))
	e.client = testkit.Session(t, e.printed)
	return e
}

func testToken(t testing.TB) string {
	t.Helper()
	tok, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func migration() v1alpha1.RevisionMigration {
	m := v1alpha1.RevisionMigration{ObjectMeta: metav1.ObjectMeta{Name: "to-1-28", CreationTimestamp: metav1.NewTime(t0)}}
	m.Spec.From, m.Spec.To = "1-27", "1-28"
	m.Status.Phase, m.Status.CurrentWave, m.Status.Reason = v1alpha1.MigrationHalted, 0, "wave canary: retries per request rose"
	ready := metav1.NewTime(t0)
	m.Status.Waves = []v1alpha1.ResolvedWave{
		{Name: "canary", Namespaces: []string{"shop"}, ReadyAt: &ready, Judgement: &v1alpha1.WaveJudgement{Outcome: "Fail", JudgedAt: t0.Format(time.RFC3339), Reasons: []string{"resets rose on shop/cart-1"},
			Rows: []v1alpha1.JudgementRow{{Pod: "shop/cart-1", Metric: v1alpha1.MetricResetsSent, Before: "0/s", After: "2/s", P: "p<0.001", Regressed: true}}}},
		{Name: "rest", Namespaces: []string{"billing"}},
	}
	m.Status.Namespaces = []v1alpha1.NamespaceStatus{{Name: "shop", Wave: 0, Phase: v1alpha1.NamespaceReady, Pods: 3}, {Name: "billing", Wave: 1, Phase: v1alpha1.NamespacePending}}
	return m
}

func (e *env) get(path string) (int, string) {
	e.t.Helper()
	resp, err := e.client.Get(e.srv.URL + path)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func wantIn(t *testing.T, page string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(page, s) {
			t.Errorf("the page lacks %q", s)
		}
	}
}

func TestListPageShowsRolloutsAndMigrations(t *testing.T) {
	e := newEnv(t, false, haltedRollout("faulty", 9))
	code, page := e.get("/")
	if code != http.StatusOK {
		t.Fatalf("GET /: %d", code)
	}
	wantIn(t, page, `<a href="/rollouts/faulty">faulty</a>`, `phase-Halted">Halted`, "0/9", "5m00s",
		`<a href="/migrations/to-1-28">to-1-28</a>`, "1-27 → 1-28", "1/2", `<progress max="100" value="50">`, `src="/static/app.js"`)
}

func TestRolloutPageGroupsNodesAndNamesTheHalt(t *testing.T) {
	e := newEnv(t, false, haltedRollout("faulty", 9))
	_, page := e.get("/rollouts/faulty")
	wantIn(t, page,
		`Halted at <a href="/rollouts/faulty/nodes/node-001" class="halted-node">node-001</a>: the judge found a regression</h2>
<p class="reason">gate Fail: resetsReceived rose on default/web-1 (p&lt;0.001)</p>`,
		"nodewise explain faulty --node node-001", "nodewise rollback faulty", "nodewise resume faulty",
		"Canary · Wave 1 · zone zone-a · 1 node<", "Wave 2 · zone zone-b · 1 node<", "Wave 2 · zone zone-c", "Wave 3 · zone zone-a",
		`<tr id="node-node-001" class="bad">`, "2m00s", `data-action="abort"`)
	// The planned order is kept: node-002 before node-009.
	if strings.Index(page, `id="node-node-002"`) > strings.Index(page, `id="node-node-009"`) {
		t.Error("nodes are not in the planned order")
	}
}

func TestNodePageShowsTheJudgesNumbers(t *testing.T) {
	e := newEnv(t, false, haltedRollout("faulty", 3))
	_, page := e.get("/rollouts/faulty/nodes/node-001")
	wantIn(t, page, `id="node-state">Failed`, "Verdict:</strong> Fail: resetsReceived rose on default/web-1",
		`data-pod="default/web-1"`, "0.05/s → 3.9/s", "×78", "×1 over 9 control pods", "p&lt;0.001", "<strong>regressed</strong>",
		"p50 1.0ms p99 4.0ms → p50 1.1ms p99 4.2ms", "connect latency",
		"<h3>Probe</h3>", "nodewise-probe/probe-x", "too little traffic to test",
		"a 60 s baseline before the swap against a 60 s soak", "24 tests", "start to finish <b>2m00s</b>",
		`style="width: 1.3%"`, `style="width: 100%"`,
		"http://grafana.example:3000/d/nodewise-node-health/?from=1796266920000&amp;to=1796266980000&amp;var-node=node-001", // the soak window
		"?from=1796266800000&amp;to=1796266860000&amp;var-node=node-001",                                                    // the baseline window
		`<td class="ages">40 open, median ≥45 s, oldest ≥600 s → 2 open, median &lt;1 s, oldest ≥1 s</td>`, `<td class="ages">none open → none open</td>`,
		`id="enrollment">enrolled 3/4 (the traffic figures alone: Pass)`, `Every reason behind the verdict (3)`, "<li>agent clock skew 0.2s</li>", "<li>default/web-3 not enrolled (listeners: nothing listens on 15008): was enrolled before the swap: fails the node</li>")
	// The probe's row is in its own table, not among the pods.
	pods := page[strings.Index(page, "Co-located pods"):strings.Index(page, "<h3>Probe")]
	if strings.Contains(pods, "probe-x") {
		t.Error("the probe's row is listed among the co-located pods")
	}
	if code, _ := e.get("/rollouts/faulty/nodes/node-404"); code != http.StatusNotFound {
		t.Errorf("unknown node: %d, want 404", code)
	}
	if code, _ := e.get("/rollouts/nope"); code != http.StatusNotFound {
		t.Errorf("unknown rollout: %d, want 404", code)
	}
}

func TestMigrationPageShowsWaves(t *testing.T) {
	e := newEnv(t, false)
	_, page := e.get("/migrations/to-1-28")
	wantIn(t, page, "Wave 1: canary <span class=\"wave-state\">migrated", `phase-Fail">Fail`, "resets rose on shop/cart-1", "0/s → 2/s",
		"Wave 2: rest <span class=\"wave-state\">not yet migrated", "shop <small>Ready, 3 pods", "through tag <code>canary</code>")
}

// TestEventsShareOneWatch: five open tabs get every change, from one watch
// per resource.
func TestEventsShareOneWatch(t *testing.T) {
	e := newEnv(t, false, haltedRollout("faulty", 3))
	var streams []*bufio.Reader
	for range 5 {
		req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/events", nil)
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Fatalf("content type %q", ct)
		}
		streams = append(streams, bufio.NewReader(resp.Body))
	}
	time.Sleep(100 * time.Millisecond) // the handlers have subscribed
	nr := haltedRollout("faulty", 3)
	nr.Status.Nodes[1].State = v1alpha1.NodeSoak
	e.rs.put(nr)
	for i, r := range streams {
		if got := readEvent(t, r); got != "NodeRollout/faulty" {
			t.Errorf("stream %d: event %q, want NodeRollout/faulty", i, got)
		}
	}
	if w, m := e.rs.watches.Load(), e.ms.watches.Load(); w != 1 || m != 1 {
		t.Errorf("watches: %d on NodeRollouts, %d on RevisionMigrations; want one each", w, m)
	}
	// The page reads the informer's cache: the change is on it.
	if _, page := e.get("/rollouts/faulty"); !strings.Contains(page, `<tr id="node-node-002" class="busy">`) {
		t.Error("the rollout page does not show node-002 soaking after the change")
	}
}

func readEvent(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	event, data := readSSE(t, r)
	if event != "change" {
		return event + ": " + data
	}
	return data
}

// readSSE is the next server-sent event's name and data (a comment or a
// heartbeat skipped), or "no event" after 10 s.
func readSSE(t *testing.T, r *bufio.Reader) (event, data string) {
	t.Helper()
	type ev struct{ event, data string }
	done := make(chan ev, 1)
	go func() {
		var event string
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				done <- ev{"error", err.Error()}
				return
			}
			line = strings.TrimSuffix(line, "\n")
			if name, ok := strings.CutPrefix(line, "event: "); ok {
				event = name
			}
			if data, ok := strings.CutPrefix(line, "data: "); ok && event != "" {
				done <- ev{event, data}
				return
			}
		}
	}()
	select {
	case e := <-done:
		return e.event, e.data
	case <-time.After(10 * time.Second):
		return "no event", ""
	}
}

func (e *env) post(path string, header bool) (int, string) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+path, nil)
	if header {
		req.Header.Set("X-Nodewise-Action", "1")
	}
	resp, err := e.client.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestActions(t *testing.T) {
	e := newEnv(t, false, haltedRollout("faulty", 3))
	if code, body := e.post("/rollouts/faulty/actions/pause", false); code != http.StatusForbidden || len(e.rs.patches) != 0 {
		t.Errorf("an action without the dashboard's header: %d %s, patches %v", code, body, e.rs.patches)
	}
	if code, body := e.post("/rollouts/faulty/actions/pause", true); code != http.StatusOK || !strings.Contains(body, "NodeRollout faulty paused") {
		t.Errorf("pause: %d %s", code, body)
	}
	if code, _ := e.post("/rollouts/faulty/actions/resume", true); code != http.StatusOK {
		t.Errorf("resume: %d", code)
	}
	if code, _ := e.post("/rollouts/faulty/actions/explode", true); code != http.StatusNotFound {
		t.Errorf("an unknown action: %d, want 404", code)
	}
	if len(e.rs.patches) != 2 || e.rs.patches[0] != `faulty {"spec":{"paused":true}}` || !strings.Contains(e.rs.patches[1], `"nodewise.io/resume-token":"2026-12-03T03:05:00Z"`) {
		t.Errorf("patches: %q", e.rs.patches)
	}
	e.rs.patchErr = forbidden()
	code, body := e.post("/rollouts/faulty/actions/abort", true)
	if code != http.StatusForbidden || !strings.Contains(body, "forbidden: your credentials may not patch NodeRollout faulty") {
		t.Errorf("abort without RBAC: %d %s", code, body)
	}
}

func TestReadOnlyHasNoActions(t *testing.T) {
	e := newEnv(t, true, haltedRollout("faulty", 3))
	if _, page := e.get("/rollouts/faulty"); strings.Contains(page, "data-action=") {
		t.Error("a read-only dashboard shows the actions")
	}
	if code, _ := e.post("/rollouts/faulty/actions/pause", true); code != http.StatusMethodNotAllowed || len(e.rs.patches) != 0 {
		t.Errorf("a read-only dashboard's action: %d, patches %v", code, e.rs.patches)
	}
}

func TestFragmentIsMainOnly(t *testing.T) {
	e := newEnv(t, false, haltedRollout("faulty", 3))
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/rollouts/faulty", nil)
	req.Header.Set("X-Nodewise-Fragment", "1")
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if strings.Contains(string(b), "<html") || !strings.Contains(string(b), `id="node-node-001"`) {
		t.Errorf("the fragment is not the main section alone: %.200s", b)
	}
}

func TestConfigValidation(t *testing.T) {
	if _, err := New(Config{}); err == nil || !strings.Contains(err.Error(), "Rollouts") {
		t.Errorf("no Rollouts: %v", err)
	}
	if _, err := New(Config{Rollouts: newFakeRollouts(), GrafanaURL: "grafana:3000"}); err == nil || !strings.Contains(err.Error(), "GrafanaURL") {
		t.Errorf("a Grafana URL without scheme: %v", err)
	}
	if _, err := New(Config{Rollouts: newFakeRollouts()}); err == nil || !strings.Contains(err.Error(), "Token") {
		t.Errorf("actions without a session token: %v", err)
	}
	for _, bad := range []string{"", "http://dash.example", "dash.example/x", "dash.example:"} {
		if _, err := New(Config{Rollouts: newFakeRollouts(), ReadOnly: true, AllowedHosts: []string{bad}}); err == nil || !strings.Contains(err.Error(), "AllowedHosts") {
			t.Errorf("AllowedHosts %q: %v", bad, err)
		}
	}
}

// started is a started server of cfg, stopped at t's end.
func started(t testing.TB, cfg Config) *Server {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestListWithoutMigrations(t *testing.T) {
	s := started(t, Config{Rollouts: newFakeRollouts(haltedRollout("faulty", 3)), ReadOnly: true})
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/", nil))
	if page := rec.Body.String(); !strings.Contains(page, "/rollouts/faulty") || strings.Contains(page, "Revision migrations") {
		t.Errorf("a dashboard without RevisionMigrations lists them, or not the rollout: %.300s", page)
	}
}

// unlistable is a RevisionMigration resource the credentials may not read.
type unlistable struct{ fakeMigrations }

func (*unlistable) List(context.Context, metav1.ListOptions) (*v1alpha1.RevisionMigrationList, error) {
	return nil, forbidden()
}

func TestRolloutsServedWhenMigrationsCannotBeListed(t *testing.T) {
	tok := testToken(t)
	s := started(t, Config{Rollouts: newFakeRollouts(haltedRollout("faulty", 3)), Migrations: &unlistable{}, Token: tok})
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1/", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	s.Handler().ServeHTTP(rec, req)
	if page := rec.Body.String(); rec.Code != http.StatusOK || !strings.Contains(page, "/rollouts/faulty") || !strings.Contains(page, "RevisionMigrations cannot be listed") {
		t.Errorf("%d: %.400s", rec.Code, page)
	}
}

// unlistableRollouts are NodeRollouts the credentials may not read.
type unlistableRollouts struct{ *fakeRollouts }

func (unlistableRollouts) List(context.Context, metav1.ListOptions) (*v1alpha1.NodeRolloutList, error) {
	return nil, forbidden()
}

// TestStartFailsWhenRolloutsCannotBeListed: the CLI says why instead of
// waiting forever for a cache that never fills.
func TestStartFailsWhenRolloutsCannotBeListed(t *testing.T) {
	s, err := New(Config{Rollouts: unlistableRollouts{newFakeRollouts()}, Token: testToken(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Start(ctx); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "listing NodeRollouts") {
		t.Errorf("Start: %v, want the Forbidden listing NodeRollouts", err)
	}
}

// TestFailedRolloutShowsWhy: a rollout that could not start (Failed, its
// reason in the Valid condition, no halt reason) is shown as failed, in the
// list and on its page, with that reason.
func TestFailedRolloutShowsWhy(t *testing.T) {
	const why = "spec.nodeSelector pool=ingres matches no node: check its labels"
	nr := &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: "nowhere", CreationTimestamp: metav1.NewTime(t0)}}
	nr.Status.Phase = v1alpha1.PhaseFailed
	nr.Status.Conditions = []metav1.Condition{{Type: "Valid", Status: metav1.ConditionFalse, Reason: "Invalid", Message: why}}
	e := newEnv(t, false, nr)
	_, page := e.get("/")
	wantIn(t, page, `phase-Failed">Failed`, `<td class="reason">`+why+`</td>`)
	_, page = e.get("/rollouts/nowhere")
	wantIn(t, page, `phase-Failed" id="phase">Failed`, `<section class="halt" id="failed">`, `<p class="reason">`+why+`</p>`)
	_, css := e.get("/static/style.css")
	if !regexp.MustCompile(`(?m)^[^{]*\.phase-Failed[ ,{][^{]*\{[^}]*var\(--bad\)`).MatchString(css) {
		t.Error("style.css does not colour .phase-Failed as bad")
	}
}
