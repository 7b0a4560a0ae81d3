package leader

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
)

// An API server outage makes a replica unready, never dead: /healthz fails
// with the check's reason while /livez still answers.
func TestLivenessOutlastsAFailingCheck(t *testing.T) {
	down := func(context.Context) error { return errors.New("API server does not answer") }
	srv, err := ServeMetrics("127.0.0.1:0", "", prometheus.NewRegistry(), zap.NewNop(), down)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	addr := "http://" + srv.Addr
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != http.StatusServiceUnavailable || body != "API server does not answer\n" {
		t.Errorf("/healthz = %d %q, want 503 with the check's reason", code, body)
	}
	if code, body := get("/livez"); code != http.StatusOK || body != "ok" {
		t.Errorf("/livez = %d %q, want 200 ok", code, body)
	}
}
