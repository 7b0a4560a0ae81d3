package remote

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodewise/nodewise/health/remote/agenttest"
	"github.com/nodewise/nodewise/sim/simpki"
)

// client is a client of the rig's agent, retrying fast.
func client(t *testing.T, r *agenttest.Agent, mut func(*AgentConfig)) *Agent {
	t.Helper()
	cfg := AgentConfig{CAFile: r.CAFile, TokenFile: r.TokFile, RetryWaitMin: time.Millisecond, RetryWaitMax: 5 * time.Millisecond,
		URLFor: r.URLFor}
	if mut != nil {
		mut(&cfg)
	}
	c, err := NewAgent(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestAgentClientSnapshot(t *testing.T) {
	r := agenttest.New(t)
	s, err := client(t, r, nil).Snapshot(context.Background(), "node-a")
	if err != nil {
		t.Fatal(err)
	}
	if s.Node != "node-a" || len(s.Pods) != 1 || s.Pods[0].ResetsReceived != 3 || !s.StartTime.Equal(r.Snap.StartTime) {
		t.Errorf("snapshot %+v", s)
	}
}

func TestAgentClientRetriesThenSucceeds(t *testing.T) {
	r := agenttest.New(t)
	r.FailNext.Store(2)
	if _, err := client(t, r, nil).Snapshot(context.Background(), "node-a"); err != nil {
		t.Fatalf("two 503s then 200 with RetryMax 2: %v", err)
	}
	if n := r.Calls.Load(); n != 3 {
		t.Errorf("%d calls, want 3", n)
	}
	r.FailNext.Store(5)
	r.Calls.Store(0)
	_, err := client(t, r, nil).Snapshot(context.Background(), "node-a")
	if !errors.Is(err, ErrAgentUnavailable) || !strings.Contains(err.Error(), "503") || r.Calls.Load() != 3 {
		t.Errorf("persistent 503: %v after %d calls", err, r.Calls.Load())
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
	r := agenttest.New(t)
	bundle := filepath.Join(t.TempDir(), "ca.crt")
	other, err := os.ReadFile(unrelatedCA(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bundle, other, 0o600); err != nil {
		t.Fatal(err)
	}
	c := client(t, r, func(c *AgentConfig) { c.CAFile, c.RetryMax = bundle, -1 })
	if _, err := c.Snapshot(context.Background(), "node-a"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("with the unrelated CA: %v, want a certificate error", err)
	}
	rig, err := os.ReadFile(r.CAFile)
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
	r := agenttest.New(t)
	otherCA := unrelatedCA(t)
	badTok := filepath.Join(t.TempDir(), "bad")
	_ = os.WriteFile(badTok, []byte("wrong"), 0o600)

	for _, c := range []struct {
		name string
		mut  func(*AgentConfig)
		rig  func()
		want string
	}{
		{"wrong token", func(c *AgentConfig) { c.TokenFile = badTok }, nil, "rejected the token"},
		{"untrusted certificate", func(c *AgentConfig) { c.CAFile = otherCA }, nil, "certificate"},
		{"agent answers for another node", nil, func() { r.Set(func() { r.Snap.Node = "node-b" }) }, `answered for node "node-b"`},
		{"timeout", func(c *AgentConfig) { c.Timeout, c.RetryMax = 100*time.Millisecond, -1 }, func() { r.Set(func() { r.Snap.Node, r.Hang = "node-a", true }) }, "Timeout"},
		{"agent down", nil, func() { r.Set(func() { r.Hang = false }); r.Srv.Close() }, "connect"},
	} {
		if c.rig != nil {
			c.rig()
		}
		_, err := client(t, r, c.mut).Snapshot(context.Background(), "node-a")
		if !errors.Is(err, ErrAgentUnavailable) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want ErrAgentUnavailable containing %q", c.name, err, c.want)
		}
	}
}

func TestAgentClientConfigErrors(t *testing.T) {
	r := agenttest.New(t)
	empty := filepath.Join(t.TempDir(), "empty")
	_ = os.WriteFile(empty, []byte(" \n"), 0o600)
	for _, c := range []struct {
		cfg  AgentConfig
		want string
	}{
		{AgentConfig{TokenFile: r.TokFile}, "CAFile is required"},
		{AgentConfig{CAFile: r.CAFile}, "TokenFile is required"},
		{AgentConfig{CAFile: r.CAFile, TokenFile: empty}, "is empty"},
		{AgentConfig{CAFile: r.TokFile, TokenFile: r.TokFile}, "no PEM certificate"},
		{AgentConfig{CAFile: r.CAFile, TokenFile: r.TokFile, Timeout: -time.Second}, "Timeout"},
	} {
		if _, err := NewAgent(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.want)
		}
	}
}
