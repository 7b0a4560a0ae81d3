package dashboard

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// stranger sends one request to the dashboard as someone who never saw its
// printed URL: no cookie, no Authorization, with the Host given.
func (e *env) stranger(method, path, host string, header map[string]string) (int, string) {
	e.t.Helper()
	req, _ := http.NewRequest(method, e.srv.URL+path, nil)
	if host != "" {
		req.Host = host
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultTransport.RoundTrip(req) // no redirects followed, no cookies
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") == "text/event-stream" {
		return resp.StatusCode, "(an event stream)" // it never ends
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRebindingHostIsRefused: a page of evil.example rebound to 127.0.0.1
// reaches the dashboard with its own name in Host; every path refuses it,
// the static files and a request carrying the session's token included.
func TestRebindingHostIsRefused(t *testing.T) {
	e := newEnv(t, false, haltedRollout("faulty", 3))
	for _, path := range []string{"/", "/rollouts/faulty", "/events", "/static/app.js"} {
		code, body := e.stranger(http.MethodGet, path, "evil.example:3100", nil)
		if code != http.StatusMisdirectedRequest || !strings.Contains(body, `"evil.example:3100"`) {
			t.Errorf("GET %s with Host evil.example:3100: %d %q; want 421 naming the Host", path, code, firstLine(body))
		}
	}
	code, body := e.stranger(http.MethodPost, "/rollouts/faulty/actions/resume", "evil.example:3100",
		map[string]string{"X-Nodewise-Action": "1", "Origin": "http://evil.example:3100"})
	if code != http.StatusMisdirectedRequest || len(e.rs.patches) != 0 {
		t.Errorf("a rebound resume: %d %q, patches %q; want 421 and no patch", code, firstLine(body), e.rs.patches)
	}
}

// TestActionWithoutTheSessionTokenIsRefused: a second local user's
// `curl -X POST -H 'X-Nodewise-Action: 1'` (no Origin, no token) changes
// nothing and is told where the token is.
func TestActionWithoutTheSessionTokenIsRefused(t *testing.T) {
	e := newEnv(t, false, haltedRollout("faulty", 3))
	code, body := e.stranger(http.MethodPost, "/rollouts/faulty/actions/resume", "", map[string]string{"X-Nodewise-Action": "1"})
	if code != http.StatusUnauthorized || len(e.rs.patches) != 0 {
		t.Errorf("resume without the session token: %d %q, patches %q; want 401 and no patch", code, body, e.rs.patches)
	}
	code, body = e.stranger(http.MethodPost, "/rollouts/faulty/actions/resume", "",
		map[string]string{"X-Nodewise-Action": "1", "Authorization": "Bearer " + strings.Repeat("0", 64), "Cookie": "nodewise-dashboard=guess"})
	if code != http.StatusUnauthorized || len(e.rs.patches) != 0 {
		t.Errorf("resume with a guessed token: %d %q, patches %q; want 401 and no patch", code, body, e.rs.patches)
	}
}

// TestPageWithoutTheSessionTokenIsRefused: the pages and the event stream
// answer only the session; the refusal says where its URL was printed.
func TestPageWithoutTheSessionTokenIsRefused(t *testing.T) {
	e := newEnv(t, false, haltedRollout("faulty", 3))
	for _, path := range []string{"/", "/rollouts/faulty", "/rollouts/faulty/nodes/node-001", "/migrations/to-1-28", "/events", "/?token=" + strings.Repeat("0", 48)} {
		code, body := e.stranger(http.MethodGet, path, "", nil)
		if code != http.StatusUnauthorized || !strings.Contains(body, "printed") || strings.Contains(body, "node-001") {
			t.Errorf("GET %s without the session token: %d %q; want 401 saying where the URL was printed", path, code, firstLine(body))
		}
	}
	// The style sheet and script hold nothing of the cluster's.
	if code, _ := e.stranger(http.MethodGet, "/static/app.js", "", nil); code != http.StatusOK {
		t.Errorf("GET /static/app.js: %d, want 200", code)
	}
}

// TestPrintedURLOpensTheSession: the printed URL sets an HttpOnly,
// SameSite=Strict cookie and sends the browser on to the same address
// without the token; with that cookie, or the token as a bearer, pages and
// actions work; an action from another origin is still refused.
func TestPrintedURLOpensTheSession(t *testing.T) {
	e := newEnv(t, false, haltedRollout("faulty", 3))
	pu, _ := url.Parse(e.printed)
	token := pu.Query().Get(TokenParam)
	if len(token) < 32 || pu.Path != "/" {
		t.Fatalf("printed URL %s: want /?token= with a long secret", e.printed)
	}
	code, _ := e.stranger(http.MethodGet, "/rollouts/faulty?"+TokenParam+"="+token+"&x=1", "", nil)
	if code != http.StatusSeeOther {
		t.Fatalf("GET with the token: %d, want 303", code)
	}
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/rollouts/faulty?"+TokenParam+"="+token+"&x=1", nil)
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); loc != "/rollouts/faulty?x=1" {
		t.Errorf("redirected to %q, want /rollouts/faulty?x=1 (the token gone, the rest kept)", loc)
	}
	cookies := resp.Cookies()
	if len(cookies) != 1 || cookies[0].Value != token || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode || cookies[0].Path != "/" {
		t.Fatalf("the session cookie: %+v; want HttpOnly, SameSite=Strict, Path=/ with the token", cookies)
	}
	cookie := map[string]string{"Cookie": cookies[0].Name + "=" + cookies[0].Value}
	if code, body := e.stranger(http.MethodGet, "/rollouts/faulty", "", cookie); code != http.StatusOK || !strings.Contains(body, "node-001") {
		t.Errorf("GET with the session cookie: %d", code)
	}
	if code, _ := e.stranger(http.MethodGet, "/rollouts/faulty", "localhost:1234", map[string]string{"Authorization": "Bearer " + token}); code != http.StatusOK {
		t.Errorf("GET with Authorization: Bearer at localhost: %d", code)
	}
	action := func(extra map[string]string) (int, string) {
		h := map[string]string{"X-Nodewise-Action": "1", "Authorization": "Bearer " + token}
		for k, v := range extra {
			h[k] = v
		}
		return e.stranger(http.MethodPost, "/rollouts/faulty/actions/pause", "", h)
	}
	if code, body := action(map[string]string{"Origin": "http://evil.example"}); code != http.StatusForbidden {
		t.Errorf("an action from another origin: %d %s", code, body)
	}
	if code, body := action(map[string]string{"Sec-Fetch-Site": "same-site"}); code != http.StatusForbidden {
		t.Errorf("an action fetched by another port's page: %d %s", code, body)
	}
	if len(e.rs.patches) != 0 {
		t.Errorf("refused actions patched: %q", e.rs.patches)
	}
	if code, body := action(map[string]string{"Origin": e.srv.URL, "Sec-Fetch-Site": "same-origin"}); code != http.StatusOK || len(e.rs.patches) != 1 {
		t.Errorf("the page's own pause: %d %s, patches %q", code, body, e.rs.patches)
	}
}

// TestHostAllowList: loopback names at any port, the listen address, and
// the names the user added; nothing else.
func TestHostAllowList(t *testing.T) {
	s := started(t, Config{Rollouts: newFakeRollouts(), ReadOnly: true, AllowedHosts: []string{"dash.example", "jump.example:8443", "[fd00::1]"}})
	listen := listenRule(&net.TCPAddr{IP: net.ParseIP("10.1.2.3"), Port: 3100})
	for host, want := range map[string]bool{
		"127.0.0.1:3100": true, "localhost:8080": true, "LOCALHOST:3100": true, "[::1]:3100": true, "127.0.0.1": true,
		"10.1.2.3:3100": true, "10.1.2.3:3101": false, "10.1.2.4:3100": false,
		"dash.example:3100": true, "dash.example": true, "jump.example:8443": true, "jump.example:3100": false, "[fd00::1]:3100": true,
		"evil.example:3100": false, "localhost.evil.example:3100": false, "127.0.0.1.nip.io:3100": false, "": false,
	} {
		if got := s.hostAllowed(host, listen); got != want {
			t.Errorf("Host %q: allowed %v, want %v", host, got, want)
		}
	}
	if r := listenRule(&net.TCPAddr{IP: net.IPv4zero, Port: 3100}); r != (hostRule{}) {
		t.Errorf("0.0.0.0:3100 is a Host a browser sends: %+v", r)
	}
	// Bound to every interface, the printed URL is opened at loopback.
	s = started(t, Config{Rollouts: newFakeRollouts(), Token: "t0ken"})
	for addr, want := range map[string]string{"0.0.0.0:3100": "http://127.0.0.1:3100/?token=t0ken", "[::]:3100": "http://[::1]:3100/?token=t0ken", "10.1.2.3:3100": "http://10.1.2.3:3100/?token=t0ken"} {
		if got := s.URL(addr); got != want {
			t.Errorf("URL(%s) = %s, want %s", addr, got, want)
		}
	}
}
