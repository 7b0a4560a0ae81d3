package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/nodewise/nodewise/orchestrator"
)

// TestMissingLeaseNamespaceSaysSo: run by hand against a cluster without
// its Lease namespace, the orchestrator stops with one line naming the
// namespace and how to fix it, instead of retrying the Lease forever.
func TestMissingLeaseNamespaceSaysSo(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, 1)
	o, err := orchestrator.New(orchestrator.Config{
		RESTConfig: e.c.Config, Namespace: "nodewise-system", Identity: "by-hand",
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond,
		Registry: prometheus.NewRegistry(), Logger: zap.NewNop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = o.Run(ctx)
	if ctx.Err() != nil {
		t.Fatal("Run kept retrying for a minute without saying the namespace is missing")
	}
	if err == nil || !strings.Contains(err.Error(), `namespace "nodewise-system" for the leader Lease`) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Run: %v, want one line naming the missing namespace", err)
	}
}
