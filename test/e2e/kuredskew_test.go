package e2e

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator"
	"github.com/nodewise/nodewise/orchestrator/locks"
)

// TestKuredLockHeldUnderClockSkew: issue 48 defect 8 (Kured's lock under
// clock skew). The orchestrator's clock is 5 s behind the API server's and
// Kured's, more than half the lock's 8 s TTL. While its node is held in
// flight (it soaks for ever), a Kured pod tries to acquire the lock every
// 100 ms for three TTLs, by its own (the real) clock: it never gets it. The
// lock's created is the API server's time, not the orchestrator's.
func TestKuredLockHeldUnderClockSkew(t *testing.T) {
	const ttl, skew, name = 8 * time.Second, 5 * time.Second, "kured-skew"
	e := newEnv(t, 2, 1)
	e.kuredDaemonSet("")
	k := kured{client: e.c.Client, node: e.c.Nodes[1].Name}
	e.upgrade("1.28.1")
	e.runInProcessWith("skewed", func(c *orchestrator.Config) {
		c.Now = func() time.Time { return time.Now().Add(-skew) }
		c.KuredLockTTL, c.HoldAfterPersist = ttl, v1alpha1.NodeSoak
	})
	e.apply(rollout(name, func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
		s.Soak = &v1alpha1.Duration{Duration: time.Second}
	}))
	node := e.waitStep(name, v1alpha1.NodeSoak) // held here for ever
	tries := e.kuredTrying(k, name)
	// The lock's age by the real clock: renewed at a quarter of the TTL,
	// by the API server's clock (a pass and a second of measure later at most).
	oldest, newest := time.Duration(0), time.Duration(0)
	for end := time.Now().Add(3 * ttl); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		if v, ok := e.kuredLock(); ok && v.NodeID == locks.KuredHolder(name) {
			age := time.Since(v.Created)
			oldest, newest = max(oldest, age), min(newest, age)
		}
	}
	tries.stop()
	tries.mu.Lock()
	defer tries.mu.Unlock()
	t.Logf("Kured tried %d times while %s was in flight, got the lock %d times; the lock's age by the real clock went from %s to %s",
		tries.tries, node, tries.won, newest, oldest)
	if oldest > ttl/4+2*time.Second || newest < -2*time.Second {
		t.Errorf("the lock's age by the real clock went from %s to %s; want it renewed every quarter TTL (%s) by the API server's clock", newest, oldest, ttl/4)
	}
	for _, b := range tries.violations {
		t.Errorf("Kured got its lock while nodewise had out: %s", b)
	}
	if tries.tries < 50 {
		t.Errorf("Kured tried only %d times: the test proves little", tries.tries)
	}
}
