package orchestrator

import (
	"context"
	"slices"
	"sync"
	"testing"

	"k8s.io/client-go/tools/cache"

	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/preflight"
)

// skewCounter is the worker's Skew, recording the nodes whose skew is checked.
type skewCounter struct {
	*preflight.Skew
	mu    sync.Mutex
	nodes []string
}

func (c *skewCounter) Check(ctx context.Context, p model.Policy, node string) error {
	c.mu.Lock()
	c.nodes = append(c.nodes, node)
	c.mu.Unlock()
	return c.Skew.Check(ctx, p, node)
}

// TestReconcilePrechecksTheNextInLine: a pass that fills the one slot
// (n1) pre-checks the node next in line (n2), not the one after it; with the
// control plane's informers not synced it pre-checks nothing (a pre-check
// must not add a request).
func TestReconcilePrechecksTheNextInLine(t *testing.T) {
	for _, synced := range []bool{true, false} {
		e := newEnv(t, append(cluster(fixture.OldHash, "n1", "n2", "n3"), rollout("r", nil))...)
		if synced {
			cp := preflight.NewControlPlaneCache(e.kube, e.ex.cfg.IstioNamespace)
			cp.Run(e.ctx.Done())
			if !cache.WaitForCacheSync(e.ctx.Done(), cp.Synced) {
				t.Fatal("control plane cache not synced")
			}
			e.ex.cpCache, e.ex.skew.Cache = cp, cp
		}
		world := &skewCounter{Skew: e.ex.skew}
		e.ex.worker.Skew = world
		if err := e.pass("r"); err != nil {
			t.Fatal(err)
		}
		e.ex.wg.Wait()
		slices.Sort(world.nodes)
		want := []string{"n1"} // n1's own preflight
		if synced {
			want = []string{"n1", "n2"}
		}
		if !slices.Equal(world.nodes, want) {
			t.Errorf("synced %v: skew checked on %v, want %v", synced, world.nodes, want)
		}
	}
}
