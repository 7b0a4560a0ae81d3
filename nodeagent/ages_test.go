package nodeagent

import (
	"fmt"
	"testing"
	"time"

	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/test/netrig"
)

// TestConnAgesMatchOpenStreams opens groups of idle streams at known times
// and checks that each lands in the age bucket its age says, on both the
// client (app) and the stand-in (proxy) side, and that closed streams leave
// the buckets.
func TestConnAgesMatchOpenStreams(t *testing.T) {
	r := netrig.New(t)
	pods, res := rigPods(r, "streams", "idle")
	pods["streams"].StartStandin()
	ra := startAgent(t, ModeEBPF, res, nil)
	target := fmt.Sprintf("%s:15006", pods["streams"].IP)

	type group struct {
		n      int
		opened time.Time
		close  func()
	}
	var groups []*group
	open := func(n int) *group {
		closeAll, err := pods["streams"].Hold(target, n)
		if err != nil {
			t.Fatalf("opening %d streams: %v", n, err)
		}
		g := &group{n: n, opened: time.Now(), close: closeAll}
		groups = append(groups, g)
		t.Cleanup(closeAll)
		return g
	}
	old := open(4)
	time.Sleep(5500 * time.Millisecond)
	open(2)
	time.Sleep(2500 * time.Millisecond)
	open(3)

	s := ra.snapshot(t)
	want := make([]uint64, len(health.AgeBucketBoundsSeconds)+1)
	for _, g := range groups {
		age := s.Time.Sub(g.opened).Seconds()
		want[ageBucket(age)] += uint64(g.n)
		t.Logf("group of %d: age %.2fs, bucket %d", g.n, age, ageBucket(age))
	}
	for _, side := range []health.Side{health.SideApp, health.SideProxy} {
		got := podSide(t, s, "streams", side).ConnAges
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s ages %v, want %v", side, got, want)
		}
	}
	if idle := podSide(t, s, "idle", health.SideApp).ConnAges; sum(idle) != 0 {
		t.Errorf("idle pod has ages %v", idle)
	}

	// Closing the oldest group takes it out of both sides.
	old.close()
	want[ageBucket(s.Time.Sub(old.opened).Seconds())] -= uint64(old.n)
	deadline := time.Now().Add(10 * time.Second)
	for {
		s = ra.snapshot(t)
		app, proxy := podSide(t, s, "streams", health.SideApp), podSide(t, s, "streams", health.SideProxy)
		if sum(app.ConnAges) == 5 && sum(proxy.ConnAges) == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after closing 4 of 9 streams: app ages %v, proxy ages %v; want 5 each", app.ConnAges, proxy.ConnAges)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
