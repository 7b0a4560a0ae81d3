package nodeagent

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nodewise/nodewise/bpf"
	"github.com/nodewise/nodewise/health/wire"
)

func fakeLoaded(p *fakeProbe) func(*Config) {
	return func(c *Config) { c.loadProbe = func() (probe, error) { return p, nil } }
}

func TestNewRejectsBadConfig(t *testing.T) {
	files := writeTLSFiles(t)
	good := Config{Node: "n", CertFile: files.cert, KeyFile: files.key, TokenFile: files.token}
	cases := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"unknown mode", func(c *Config) { c.Mode = "turbo" }, `mode "turbo": want one of auto, ebpf, proc`},
		{"missing cert", func(c *Config) { c.CertFile = "" }, "cert and key files are required"},
		{"cert file absent", func(c *Config) { c.CertFile = files.cert + ".missing" }, "loading TLS certificate"},
		{"missing token", func(c *Config) { c.TokenFile = "" }, "token file is required"},
		{"empty token", func(c *Config) {
			p := files.token + ".empty"
			if err := os.WriteFile(p, []byte("\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			c.TokenFile = p
		}, "is empty"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.mutate(&c)
			_, err := New(c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
		})
	}
	if _, err := New(good); err != nil {
		t.Fatalf("good config rejected: %v", err)
	}
}

func TestRunFailsWhenPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	files := writeTLSFiles(t)
	a, err := New(Config{Node: "n", Mode: ModeProc, ListenAddr: l.Addr().String(), CertFile: files.cert, KeyFile: files.key, TokenFile: files.token})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = a.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "address already in use") || !strings.Contains(err.Error(), l.Addr().String()) {
		t.Fatalf("Run: %v, want a one-line 'listening on %s: ... address already in use'", err, l.Addr())
	}
}

func TestAutoFallsBackToProcWhenLoadRefused(t *testing.T) {
	refused := func(c *Config) {
		c.loadProbe = func() (probe, error) {
			return nil, fmt.Errorf("loading eBPF objects: kernel has no BTF: %w", ebpf.ErrNotSupported)
		}
	}
	ra := startAgent(t, ModeAuto, NewStaticResolver(nil), refused)
	if s := ra.snapshot(t); s.Mode != wire.ModeProc {
		t.Errorf("snapshot mode %q, want proc", s.Mode)
	}
	if v := testutil.ToFloat64(ra.Agent.fallback); v != 1 {
		t.Errorf("nodewise_agent_ebpf_fallback = %v, want 1", v)
	}
	if v := testutil.ToFloat64(ra.Agent.modeGauge.WithLabelValues("proc")); v != 1 {
		t.Errorf(`nodewise_agent_mode{mode="proc"} = %v, want 1`, v)
	}

	// Mode ebpf has no fallback: the refusal is Run's error.
	files := writeTLSFiles(t)
	cfg := Config{Node: "n", Mode: ModeEBPF, ListenAddr: "127.0.0.1:0", CertFile: files.cert, KeyFile: files.key, TokenFile: files.token}
	refused(&cfg)
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = a.Run(context.Background())
	if !errors.Is(err, ebpf.ErrNotSupported) || !strings.Contains(err.Error(), "mode ebpf has no fallback") {
		t.Fatalf("Run in mode ebpf with a refused load: %v", err)
	}
}

func TestAPIRequiresToken(t *testing.T) {
	ra := startAgent(t, ModeEBPF, NewStaticResolver(nil), fakeLoaded(&fakeProbe{}))
	for _, tc := range []struct {
		path, token string
		want        int
	}{
		{"/healthz", "", http.StatusOK},
		{"/v1/snapshot", "", http.StatusUnauthorized},
		{"/v1/snapshot", "wrong", http.StatusUnauthorized},
		{"/v1/snapshot", ra.files.tokenValue + "x", http.StatusUnauthorized},
		{"/metrics", "", http.StatusUnauthorized},
		{"/v1/snapshot", ra.files.tokenValue, http.StatusOK},
		{"/metrics", ra.files.tokenValue, http.StatusOK},
	} {
		if code, body := ra.get(t, tc.path, tc.token); code != tc.want {
			t.Errorf("GET %s with token %q: %d %s, want %d", tc.path, tc.token, code, body, tc.want)
		}
	}
	// A rotated token file takes effect without a restart.
	if err := os.WriteFile(ra.files.token, []byte("rotated\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	future := time.Now().Add(time.Minute)
	if err := os.Chtimes(ra.files.token, future, future); err != nil {
		t.Fatal(err)
	}
	if code, _ := ra.get(t, "/v1/snapshot", ra.files.tokenValue); code != http.StatusUnauthorized {
		t.Errorf("old token after rotation: %d, want 401", code)
	}
	if code, _ := ra.get(t, "/v1/snapshot", "rotated"); code != http.StatusOK {
		t.Errorf("new token after rotation: %d, want 200", code)
	}
}

func TestSnapshotAndMetricsAttributeOnlyKnownNamespaces(t *testing.T) {
	c := &bpf.Counters{ResetsSent: 3, ResetsReceived: 5, Connects: 7, Retransmits: 2}
	c.ConnectFailures[bpf.FailRefused] = 4
	c.ConnectFailures[bpf.FailTimeout] = 1
	c.ConnectLatency[6] = 7 // [64, 128) µs
	fp := &fakeProbe{missed: 3, counters: map[bpf.Key]*bpf.Counters{
		{Netns: 100, Side: bpf.SideApp}:   c,
		{Netns: 100, Side: bpf.SideProxy}: {ResetsSent: 11},
		{Netns: 999, Side: bpf.SideApp}:   {ResetsReceived: 1000}, // the host: unattributed
	}}
	res := NewStaticResolver(map[uint32]Pod{100: {Namespace: "shop", Name: "cart-1", UID: "u1"}, 200: {Namespace: "shop", Name: "quiet", UID: "u2"}})
	ra := startAgent(t, ModeEBPF, res, fakeLoaded(fp))
	s := ra.snapshot(t)
	if len(s.Pods) != 4 {
		t.Fatalf("want 2 pods × 2 sides, got %d: %+v", len(s.Pods), s.Pods)
	}
	app := podSide(t, s, "cart-1", wire.SideApp)
	if app.Namespace != "shop" || app.UID != "u1" || app.ResetsSent != 3 || app.ResetsReceived != 5 || app.Connects != 7 || app.Retransmits != 2 ||
		app.ConnectFailures[wire.ConnectRefused] != 4 || app.ConnectFailures[wire.ConnectTimeout] != 1 || len(app.ConnectFailures) != 2 ||
		app.ConnectLatency.Buckets[6] != 7 || len(app.ConnectLatency.Buckets) != wire.Log2Buckets || len(app.SRTT.Buckets) != wire.Log2Buckets ||
		len(app.ConnAges) != len(wire.AgeBucketBoundsSeconds)+1 {
		t.Errorf("cart-1/app: %+v", app)
	}
	if p := podSide(t, s, "cart-1", wire.SideProxy); p.ResetsSent != 11 {
		t.Errorf("cart-1/proxy: %+v", p)
	}
	for _, p := range s.Pods {
		if p.ResetsReceived >= 1000 {
			t.Errorf("host namespace counts attributed to %s", p.Name)
		}
	}

	code, body := ra.get(t, "/metrics", ra.files.tokenValue)
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		`nodewise_pod_tcp_resets_received_total{namespace="shop",pod="cart-1",side="app"} 5`,
		`nodewise_pod_tcp_resets_sent_total{namespace="shop",pod="cart-1",side="proxy"} 11`,
		`nodewise_pod_tcp_connect_failures_total{namespace="shop",pod="cart-1",side="app"} 5`,
		`nodewise_pod_tcp_connect_latency_seconds_bucket{namespace="shop",pod="cart-1",side="app",le="0.000128"} 7`,
		`nodewise_pod_tcp_connect_latency_seconds_bucket{namespace="shop",pod="cart-1",side="app",le="6.4e-05"} 0`,
		`nodewise_pod_tcp_resets_received_total{namespace="shop",pod="quiet",side="app"} 0`,
		`nodewise_agent_mode{mode="ebpf"} 1`,
		`nodewise_agent_ebpf_fallback 0`,
		`nodewise_agent_missed_events_total 3`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(string(body), "1000") {
		t.Errorf("/metrics shows the unattributed host counts")
	}
}

// TestShutdownEndsConnectionsNeverUsed holds a TLS connection open without
// a request (HTTP clients dial ahead) while the agent stops: Run must still
// return cleanly, after its grace period, rather than fail the exit.
func TestShutdownEndsConnectionsNeverUsed(t *testing.T) {
	var conn *tls.Conn
	t.Cleanup(func() { // after the agent's own cleanup, which checks Run's error
		if conn != nil {
			conn.Close()
		}
	})
	ra := startAgent(t, ModeEBPF, NewStaticResolver(nil), fakeLoaded(&fakeProbe{}))
	var err error
	conn, err = tls.Dial("tcp", strings.TrimPrefix(ra.url, "https://"), &tls.Config{RootCAs: ra.files.pool})
	if err != nil {
		t.Fatalf("dialing the agent: %v", err)
	}
}

// TestIdleConnectionsAreClosed: a client that keeps a connection open after
// its request without sending another is cut after IdleTimeout, so idle or
// slow clients cannot pile up in the agent's memory.
func TestIdleConnectionsAreClosed(t *testing.T) {
	ra := startAgent(t, ModeEBPF, NewStaticResolver(nil), func(c *Config) {
		fakeLoaded(&fakeProbe{})(c)
		c.IdleTimeout = 300 * time.Millisecond
	})
	host := strings.TrimPrefix(ra.url, "https://")
	conn, err := tls.Dial("tcp", host, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // loopback test server
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET /healthz HTTP/1.1\r\nHost: agent\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// Now idle: the server must close the connection well before this deadline.
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = br.ReadByte()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("idle connection still open after 5 s (IdleTimeout 300ms)")
	}
	if err == nil {
		t.Fatal("server sent data on an idle connection")
	}
}
