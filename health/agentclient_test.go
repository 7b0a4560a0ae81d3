package health

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/sim/simpki"
)

type agentRig struct {
	srv      *httptest.Server
	caFile   string
	tokFile  string
	calls    atomic.Int32
	failNext atomic.Int32 // answer 503 this many times first
	mu       sync.Mutex   // guards snap and hang: the handler reads them while a test case sets them
	snap     wire.Snapshot
	hang     bool
}

// set changes what the rig answers, under its lock.
func (r *agentRig) set(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
}

func newAgentRig(t *testing.T) *agentRig {
	t.Helper()
	now := time.Now().UTC()
	r := &agentRig{snap: wire.Snapshot{Node: "node-a", Time: now, StartTime: now.Add(-time.Hour), Mode: wire.ModeEBPF,
		Pods: []wire.PodCounters{pc("shop", "cart", "u1", wire.SideApp, 3, 1, 10)}}}
	r.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.calls.Add(1)
		if req.URL.Path != "/v1/snapshot" {
			http.NotFound(w, req)
			return
		}
		if req.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if r.failNext.Load() > 0 {
			r.failNext.Add(-1)
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		r.mu.Lock()
		hang, snap := r.hang, r.snap
		r.mu.Unlock()
		if hang {
			select {
			case <-req.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		_ = json.NewEncoder(w).Encode(snap)
	}))
	t.Cleanup(r.srv.Close)
	dir := t.TempDir()
	r.caFile = filepath.Join(dir, "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.srv.Certificate().Raw})
	if err := os.WriteFile(r.caFile, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	r.tokFile = filepath.Join(dir, "token")
	if err := os.WriteFile(r.tokFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *agentRig) client(t *testing.T, mut func(*AgentClientConfig)) *AgentClient {
	t.Helper()
	cfg := AgentClientConfig{CAFile: r.caFile, TokenFile: r.tokFile, RetryWaitMin: time.Millisecond, RetryWaitMax: 5 * time.Millisecond,
		URLFor: func(context.Context, string) (string, error) { return r.srv.URL, nil }}
	if mut != nil {
		mut(&cfg)
	}
	c, err := NewAgentClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestAgentClientSnapshot(t *testing.T) {
	r := newAgentRig(t)
	s, err := r.client(t, nil).Snapshot(context.Background(), "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if s.Node != "node-a" || len(s.Pods) != 1 || s.Pods[0].ResetsReceived != 3 || !s.StartTime.Equal(r.snap.StartTime) {
		t.Errorf("snapshot %+v", s)
	}
}

func TestAgentClientRetriesThenSucceeds(t *testing.T) {
	r := newAgentRig(t)
	r.failNext.Store(2)
	if _, err := r.client(t, nil).Snapshot(context.Background(), "node-a"); err != nil {
		t.Fatalf("two 503s then 200 with RetryMax 2: %v", err)
	}
	if n := r.calls.Load(); n != 3 {
		t.Errorf("%d calls, want 3", n)
	}
	r.failNext.Store(5)
	r.calls.Store(0)
	_, err := r.client(t, nil).Snapshot(context.Background(), "node-a")
	if !errors.Is(err, ErrAgentUnavailable) || !strings.Contains(err.Error(), "503") || r.calls.Load() != 3 {
		t.Errorf("persistent 503: %v after %d calls", err, r.calls.Load())
	}
}

// unrelatedCA writes a CA that signed nothing the rig serves (every httptest
// server shares one certificate) and returns its path.
func unrelatedCA(t *testing.T) string {
	t.Helper()
	ca, err := simpki.NewCA("other CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "other.pem")
	if err := os.WriteFile(path, ca.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestAgentClientFollowsTheCAFile: a CA bundle that changes on disk (a
// mounted ConfigMap after the CA rotated) is trusted from the next
// connection, without a new client; a change that does not load keeps the
// last good bundle.
func TestAgentClientFollowsTheCAFile(t *testing.T) {
	r := newAgentRig(t)
	bundle := filepath.Join(t.TempDir(), "ca.crt")
	other, err := os.ReadFile(unrelatedCA(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bundle, other, 0o600); err != nil {
		t.Fatal(err)
	}
	c := r.client(t, func(c *AgentClientConfig) { c.CAFile, c.RetryMax = bundle, -1 })
	if _, err := c.Snapshot(context.Background(), "node-a"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("with the unrelated CA: %v, want a certificate error", err)
	}
	rig, err := os.ReadFile(r.caFile)
	if err != nil {
		t.Fatal(err)
	}
	// The kubelet swaps a ConfigMap volume's files by renaming a new one in.
	next := bundle + ".new"
	if err := os.WriteFile(next, append(append([]byte(nil), other...), rig...), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(next, bundle); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Snapshot(context.Background(), "node-a"); err != nil {
		t.Fatalf("after the bundle gained the rig's CA: %v", err)
	}
	if err := os.WriteFile(bundle, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.http.HTTPClient.CloseIdleConnections() // a new handshake, against whatever the client trusts now
	if _, err := c.Snapshot(context.Background(), "node-a"); err != nil {
		t.Errorf("after a bundle that does not load: %v, want the previous bundle kept", err)
	}
}

func TestAgentClientFailures(t *testing.T) {
	r := newAgentRig(t)
	otherCA := unrelatedCA(t)
	badTok := filepath.Join(t.TempDir(), "bad")
	_ = os.WriteFile(badTok, []byte("wrong"), 0o600)

	for _, c := range []struct {
		name string
		mut  func(*AgentClientConfig)
		rig  func()
		want string
	}{
		{"wrong token", func(c *AgentClientConfig) { c.TokenFile = badTok }, nil, "rejected the token"},
		{"untrusted certificate", func(c *AgentClientConfig) { c.CAFile = otherCA }, nil, "certificate"},
		{"agent answers for another node", nil, func() { r.set(func() { r.snap.Node = "node-b" }) }, `answered for node "node-b"`},
		{"timeout", func(c *AgentClientConfig) { c.Timeout, c.RetryMax = 100*time.Millisecond, -1 }, func() { r.set(func() { r.snap.Node, r.hang = "node-a", true }) }, "Timeout"},
		{"agent down", nil, func() { r.set(func() { r.hang = false }); r.srv.Close() }, "connect"},
	} {
		if c.rig != nil {
			c.rig()
		}
		_, err := r.client(t, c.mut).Snapshot(context.Background(), "node-a")
		if !errors.Is(err, ErrAgentUnavailable) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want ErrAgentUnavailable containing %q", c.name, err, c.want)
		}
	}
}

func TestAgentClientConfigErrors(t *testing.T) {
	r := newAgentRig(t)
	empty := filepath.Join(t.TempDir(), "empty")
	_ = os.WriteFile(empty, []byte(" \n"), 0o600)
	for _, c := range []struct {
		cfg  AgentClientConfig
		want string
	}{
		{AgentClientConfig{TokenFile: r.tokFile}, "CAFile is required"},
		{AgentClientConfig{CAFile: r.caFile}, "TokenFile is required"},
		{AgentClientConfig{CAFile: r.caFile, TokenFile: empty}, "is empty"},
		{AgentClientConfig{CAFile: r.tokFile, TokenFile: r.tokFile}, "no PEM certificate"},
		{AgentClientConfig{CAFile: r.caFile, TokenFile: r.tokFile, Timeout: -time.Second}, "Timeout"},
	} {
		if _, err := NewAgentClient(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
}

// The judge over the real client: an agent that stops answering fails the node.
func TestJudgeFailsClosedWhenAgentStops(t *testing.T) {
	r := newAgentRig(t)
	c := r.client(t, nil)
	j, err := NewJudge(JudgeConfig{Source: c})
	if err != nil {
		t.Fatal(err)
	}
	_, in, _ := judgeScenario(t, 1, nil)
	r.srv.Close()
	v, err := j.Judge(context.Background(), in)
	if err != nil || v.Outcome != Fail || !hasReason(v, "did not answer") || !hasReason(v, "node agent unavailable") {
		t.Fatalf("agent stopped: %v %s %q", err, v.Outcome, v.Reasons)
	}
}
