package silence

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/test/promrig"
)

func rollout(name string) *v1alpha1.NodeRollout {
	return &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// only returns the one silence at url, failing unless there is exactly one.
func only(t *testing.T, am *promrig.Server) Silence {
	t.Helper()
	var all []Silence
	am.GetJSON(t, "/api/v2/silences", &all)
	if len(all) != 1 {
		t.Fatalf("%d silences, want 1: %+v", len(all), all)
	}
	return all[0]
}

// eventually polls cond every 100 ms; the bound is for a broken build, not a timing assertion.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
	}
}

func newSilencer(t *testing.T, url string, reg prometheus.Registerer, rec record.EventRecorder) *Silencer {
	t.Helper()
	s, err := New(Config{URL: url, Extend: 300 * time.Millisecond, TTL: 2 * time.Second, Timeout: 2 * time.Second, Registry: reg, Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestHoldMakesExtendsAndExpires: against the real Alertmanager, a held
// silence matches the node, names nodewise, the rollout and the node, is
// extended under the same ID while held, and is expired when the node is
// handed back.
func TestHoldMakesExtendsAndExpires(t *testing.T) {
	am := promrig.StartAlertmanager(t)
	end := newSilencer(t, am.URL, nil, nil).Hold(context.Background(), rollout("r1"), "node-1")
	first := only(t, am)
	if !first.Active() || first.CreatedBy != "nodewise" || !strings.Contains(first.Comment, "node-1") || !strings.Contains(first.Comment, "NodeRollout r1") {
		t.Fatalf("silence %+v: want active, by nodewise, naming node-1 and r1", first)
	}
	if want := (Matcher{Name: "node", Value: "node-1", IsEqual: true}); len(first.Matchers) != 1 || first.Matchers[0] != want {
		t.Fatalf("matchers %+v, want [%+v]", first.Matchers, want)
	}
	eventually(t, "the silence is extended", func() bool { return only(t, am).EndsAt.After(first.EndsAt) })
	if s := only(t, am); s.ID != first.ID || !s.Active() {
		t.Fatalf("extended silence %+v: want %s still active", s, first.ID)
	}
	end(true)
	if s := only(t, am); s.Active() || s.Status.State != "expired" {
		t.Fatalf("after the hand-back: %+v, want expired", s)
	}
}

// TestSilenceExpiredByHandIsNotMadeAgain: a person who expires the
// silence while the node is out has the last word: the next extension
// finds it ended early and makes none, and the hand-back expires nothing.
// A silence that ran out its TTL instead (its extensions failing) is made
// again.
func TestSilenceExpiredByHandIsNotMadeAgain(t *testing.T) {
	am := promrig.StartAlertmanager(t)
	s, err := New(Config{URL: am.URL, Extend: time.Hour, TTL: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	h := s.held(rollout("r1"), "node-1")
	h.renew(t.Context())
	first := only(t, am)
	req, _ := http.NewRequest(http.MethodDelete, am.URL+"/api/v2/silence/"+first.ID, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("expiring by hand: %v %v", err, resp)
	}
	h.renew(t.Context())
	if s := only(t, am); s.ID != first.ID || s.Active() {
		t.Fatalf("after an extension: %+v, want only %s, expired", s, first.ID)
	}
	close(h.done) // no keeper runs: renew was called here
	h.end(true)

	// Ran out instead: its end is the one given.
	s.cfg.TTL = time.Second
	lapsed := s.held(rollout("r1"), "node-2")
	lapsed.renew(t.Context())
	eventually(t, "the silence runs out", func() bool {
		var all []Silence
		am.GetJSON(t, "/api/v2/silences?filter="+url.QueryEscape(`node="node-2"`), &all)
		return len(all) == 1 && !all[0].Active()
	})
	lapsed.renew(t.Context())
	var all []Silence
	am.GetJSON(t, "/api/v2/silences?filter="+url.QueryEscape(`node="node-2"`), &all)
	if len(all) != 2 || (!all[0].Active() && !all[1].Active()) {
		t.Fatalf("after the lapse and an extension: %+v, want it made again", all)
	}
}

// TestLeftSilenceExpiresAndIsTakenOver: a silence left behind (its holder
// stopped, as a crashed or deposed leader) is still active, taken over under
// its ID by the next holder of the node, and, left again, runs out its TTL.
func TestLeftSilenceExpiresAndIsTakenOver(t *testing.T) {
	am := promrig.StartAlertmanager(t)
	newSilencer(t, am.URL, nil, nil).Hold(context.Background(), rollout("r1"), "node-1")(false)
	left := only(t, am)
	if !left.Active() {
		t.Fatalf("left silence %+v: want still active", left)
	}
	end := newSilencer(t, am.URL, nil, nil).Hold(context.Background(), rollout("r1"), "node-1")
	if s := only(t, am); s.ID != left.ID || !s.Active() {
		t.Fatalf("taken over: %+v, want %s active", s, left.ID)
	}
	end(false)
	eventually(t, "the left silence expires on its own", func() bool { return !only(t, am).Active() })
}

// TestSilenceLostWithAlertmanagerIsMadeAgain: an Alertmanager replaced
// with empty storage answers the held ID's extension with 404; the next
// extension makes the silence anew, under a new ID.
func TestSilenceLostWithAlertmanagerIsMadeAgain(t *testing.T) {
	am := promrig.StartAlertmanager(t)
	end := newSilencer(t, am.URL, nil, nil).Hold(context.Background(), rollout("r1"), "node-1")
	defer end(true)
	lost := only(t, am)
	am.Restart(t)
	var all []Silence
	eventually(t, "the silence is made again", func() bool {
		am.GetJSON(t, "/api/v2/silences", &all)
		return len(all) == 1
	})
	if s := all[0]; s.ID == lost.ID || !s.Active() || s.Matchers[0].Value != "node-1" {
		t.Fatalf("after the restart: %+v, want a new active silence over node-1", s)
	}
}

// TestUnreachableAlertmanagerHoldsNothingUp: with no Alertmanager, Hold
// returns, the failure is counted and shown once as a Warning event, and
// End returns.
func TestUnreachableAlertmanagerHoldsNothingUp(t *testing.T) {
	reg := prometheus.NewRegistry()
	rec := record.NewFakeRecorder(10)
	s := newSilencer(t, "http://127.0.0.1:1", reg, rec)
	end := s.Hold(context.Background(), rollout("r1"), "node-1")
	eventually(t, "an extension fails too", func() bool { return testutil.ToFloat64(s.errors.WithLabelValues("create")) >= 2 })
	end(true)
	if n := testutil.ToFloat64(s.errors.WithLabelValues("find")); n < 2 {
		t.Fatalf("find errors %v, want each failed call counted", n)
	}
	if got := testutil.CollectAndCount(reg, "nodewise_alertmanager_silence_errors_total"); got == 0 {
		t.Fatal("the error metric is not registered")
	}
	if len(rec.Events) != 1 {
		t.Fatalf("%d events, want one Warning for the run of failures", len(rec.Events))
	}
	if ev := <-rec.Events; !strings.HasPrefix(ev, "Warning SilenceFailed") || !strings.Contains(ev, "node-1") {
		t.Fatalf("event %q", ev)
	}
}

// TestAWorkersEndIsNoAlertmanagerFailure: calls cut short because the
// worker's context ended (its replica leaving) are not counted, warned of,
// or taken for Alertmanager being down.
func TestAWorkersEndIsNoAlertmanagerFailure(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	s := newSilencer(t, "http://127.0.0.1:1", nil, rec)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s.Hold(ctx, rollout("r1"), "node-1")(false)
	for _, op := range []string{"find", "create"} {
		if n := testutil.ToFloat64(s.errors.WithLabelValues(op)); n != 0 {
			t.Errorf("%s errors %v, want none counted", op, n)
		}
	}
	if s.down.Load() || len(rec.Events) != 0 {
		t.Errorf("down %v, %d events: want Alertmanager not taken for down", s.down.Load(), len(rec.Events))
	}
}

// TestNodesStartWithoutWaitingOnAFailingAlertmanager: once a call has
// failed, a node's Hold returns without waiting for Alertmanager (here one
// that answers nothing until the test ends); the silence is made behind it.
func TestNodesStartWithoutWaitingOnAFailingAlertmanager(t *testing.T) {
	var hang atomic.Bool
	release := make(chan struct{})
	am := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hang.Load() {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	defer am.Close()
	defer close(release)
	s, err := New(Config{URL: am.URL, Extend: time.Hour, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	s.Hold(context.Background(), rollout("r1"), "node-1")(false) // fails: Alertmanager answers 503
	hang.Store(true)
	returned := make(chan func(bool))
	go func() { returned <- s.Hold(context.Background(), rollout("r1"), "node-2") }()
	select {
	case end := <-returned:
		go end(false) // its keeper waits on the hanging call until the test ends
	case <-time.After(30 * time.Second): // a bound for a broken build, not a timing assertion
		t.Fatal("Hold waited on an Alertmanager whose last call failed")
	}
}

func TestParseMatcher(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Matcher
		err  string
	}{
		{DefaultMatcher, Matcher{Name: "node", Value: "n1", IsEqual: true}, ""},
		{`instance=~"{{.Node}}:.*"`, Matcher{Name: "instance", Value: "n1:.*", IsRegex: true, IsEqual: true}, ""},
		{`rollout != "{{.Rollout}}"`, Matcher{Name: "rollout", Value: "r1"}, ""},
		{`alertname!~"Watchdog|Info.*"`, Matcher{Name: "alertname", Value: "Watchdog|Info.*", IsRegex: true}, ""},
		{`node=n1`, Matcher{}, "the value quoted"},
		{`node="{{.Host}}"`, Matcher{}, "{{.Node}} and {{.Rollout}}"},
		{`node="{{.Node"`, Matcher{}, "unclosed action"},
	} {
		m, err := parseMatcher(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want %q", tc.in, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.in, err)
		case tc.err == "" && m.render(subject{Node: "n1", Rollout: "r1"}) != tc.want:
			t.Errorf("%s: %+v, want %+v", tc.in, m.render(subject{Node: "n1", Rollout: "r1"}), tc.want)
		}
	}
}

func TestNewRejects(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "want an http:// or https:// URL"},
		{Config{URL: "am:9093"}, "want an http:// or https:// URL"},
		{Config{URL: "http://am:9093", Extend: time.Minute, TTL: time.Minute}, "must exceed its extend period"},
		{Config{URL: "http://am:9093", Matchers: []string{"node"}}, "the value quoted"},
	} {
		if _, err := New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.cfg, err, tc.want)
		}
	}
}
