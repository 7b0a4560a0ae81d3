// Package agenttest serves a node agent's snapshot API over HTTPS on
// loopback, for the tests of the agent client and of what reads through it.
package agenttest

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodewise/nodewise/health/wire"
)

// Agent is a node agent served over HTTPS on loopback: it answers
// /v1/snapshot with Snap to the bearer token "s3cret", after answering 503
// FailNext times, and hangs while Hang is set.
type Agent struct {
	Srv      *httptest.Server
	CAFile   string
	TokFile  string
	Calls    atomic.Int32
	FailNext atomic.Int32 // answer 503 this many times first
	mu       sync.Mutex   // guards Snap and Hang: the handler reads them while a test case sets them
	Snap     wire.Snapshot
	Hang     bool
}

// Set changes what the agent answers, under its lock.
func (r *Agent) Set(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f()
}

// New starts an agent serving one pod on node-a; CAFile holds its
// certificate and TokFile the token. It stops when the test ends.
func New(t testing.TB) *Agent {
	t.Helper()
	now := time.Now().UTC()
	r := &Agent{Snap: wire.Snapshot{Node: "node-a", Time: now, StartTime: now.Add(-time.Hour), Mode: wire.ModeEBPF,
		Pods: []wire.PodCounters{{Namespace: "shop", Name: "cart", UID: "u1", Side: wire.SideApp, ResetsReceived: 3, ResetsSent: 1, Connects: 10,
			ConnectLatency: wire.Log2Histogram{Buckets: make([]uint64, wire.Log2Buckets)}, SRTT: wire.Log2Histogram{Buckets: make([]uint64, wire.Log2Buckets)},
			ConnAges: make([]uint64, len(wire.AgeBucketBoundsSeconds)+1)}}}}
	r.Srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.Calls.Add(1)
		if req.URL.Path != "/v1/snapshot" {
			http.NotFound(w, req)
			return
		}
		if req.Header.Get("Authorization") != "Bearer s3cret" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if r.FailNext.Load() > 0 {
			r.FailNext.Add(-1)
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		r.mu.Lock()
		hang, snap := r.Hang, r.Snap
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
	t.Cleanup(r.Srv.Close)
	dir := t.TempDir()
	r.CAFile = filepath.Join(dir, "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.Srv.Certificate().Raw})
	if err := os.WriteFile(r.CAFile, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	r.TokFile = filepath.Join(dir, "token")
	if err := os.WriteFile(r.TokFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return r
}

// URLFor is the agent's address whatever the node (remote.AgentConfig.URLFor).
func (r *Agent) URLFor(context.Context, string) (string, error) { return r.Srv.URL, nil }
