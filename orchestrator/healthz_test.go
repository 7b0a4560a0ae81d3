package orchestrator

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// TestHealthzFailsUntilCachesSync: against an API server that cannot be
// reached the caches never sync, and /healthz must say so rather than "ok",
// so a probe restarts (or keeps out of service) a replica that can never lead.
func TestHealthzFailsUntilCachesSync(t *testing.T) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	apiAddr := dead.Addr().String()
	dead.Close() // nothing listens there now
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := ln.Addr().String()
	ln.Close()

	o, err := New(Config{RESTConfig: &rest.Config{Host: "http://" + apiAddr, Timeout: time.Second}, Identity: "t", MetricsAddr: metricsAddr})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = o.Run(ctx) }()
	defer func() { cancel(); <-done }()

	var code int
	var body string
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get("http://" + metricsAddr + "/healthz")
		if err != nil {
			continue // not serving yet
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		code, body = resp.StatusCode, string(b)
		break
	}
	if code != http.StatusServiceUnavailable {
		t.Fatalf("/healthz with unsynced caches: %d %q, want 503", code, body)
	}
	if !strings.Contains(body, "caches have not synced") {
		t.Errorf("/healthz body %q does not say the caches have not synced", body)
	}
}
