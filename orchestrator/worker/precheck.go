package worker

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// PrecheckTTL is how long a passing pre-check of a node stands in for its
// preflight's own skew check: a gate interval's order, so a pre-check made
// while the current nodes soak serves the slot that follows them, and a
// control plane changed since is seen again within it.
const PrecheckTTL = 30 * time.Second

// Prechecks remembers the version-skew checks made for the nodes next in
// line while the current ones soak (Precheck), so a slot starts with the
// cordon. Only a fresh pass counts: a failed, expired or missing one is
// checked again in the slot, as without it. A zero Prechecks is ready.
type Prechecks struct {
	mu      sync.Mutex
	results map[string]precheck // by precheckKey
	running map[string]bool
}

type precheck struct {
	at  time.Time // when the check began
	err error
}

// passed says whether key's check passed less than PrecheckTTL before now.
func (c *Prechecks) passed(key string, now time.Time) bool {
	if c == nil || key == "" {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.results[key]
	return ok && r.err == nil && !now.Before(r.at) && now.Sub(r.at) < PrecheckTTL
}

// begin claims key's check; false when one is under way.
func (c *Prechecks) begin(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running[key] {
		return false
	}
	if c.running == nil {
		c.running = map[string]bool{}
	}
	c.running[key] = true
	return true
}

// end records key's result and drops the results past their TTL.
func (c *Prechecks) end(key string, at time.Time, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.running, key)
	if c.results == nil {
		c.results = map[string]precheck{}
	}
	for k, r := range c.results {
		if at.Sub(r.at) >= PrecheckTTL {
			delete(c.results, k)
		}
	}
	c.results[key] = precheck{at: at, err: err}
}

// precheckKey names what a node's skew check saw: the rollout's spec
// (UID, generation), the node and each target's template generation, read
// from the informer cache. A changed spec or template is a new key, never a
// stale pass; "" (a target unreadable) is never cached.
func (w *Worker) precheckKey(nr *v1alpha1.NodeRollout, p model.Policy, node string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s/%d/%s", nr.UID, nr.Generation, node)
	for _, ref := range p.Targets {
		ds, err := w.DaemonSets.DaemonSets(ref.Namespace).Get(ref.Name)
		if err != nil {
			return ""
		}
		fmt.Fprintf(&b, "/%s/%s=%d", ref.Namespace, ref.Name, ds.Generation)
	}
	return b.String()
}

// Precheck runs the version-skew check of a node next in line ahead of its
// slot and remembers the result for its preflight. It changes nothing and
// reads what preflight reads (the caches; the control plane from its
// informers once synced). A node not Ready is left for its preflight, which
// halts it with the reason.
func (w *Worker) Precheck(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, node string) {
	key := w.precheckKey(nr, p, node)
	if w.Prechecks == nil || key == "" || w.Prechecks.passed(key, w.Now()) || !w.Prechecks.begin(key) {
		return
	}
	at := w.Now()
	n, err := w.Nodes.Get(node)
	if err == nil && !model.NodeReady(n) {
		err = fmt.Errorf("node %s is not Ready", node)
	}
	if err == nil {
		err = w.Skew.Check(ctx, p, node)
	}
	w.Prechecks.end(key, at, err)
}
