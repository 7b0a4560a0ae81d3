package nodeagent

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nodewise/nodewise/health/wire"
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
	want := make([]uint64, len(wire.AgeBucketBoundsSeconds)+1)
	for _, g := range groups {
		age := s.Time.Sub(g.opened).Seconds()
		want[ageBucket(age)] += uint64(g.n)
		t.Logf("group of %d: age %.2fs, bucket %d", g.n, age, ageBucket(age))
	}
	for _, side := range []wire.Side{wire.SideApp, wire.SideProxy} {
		got := podSide(t, s, "streams", side).ConnAges
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s ages %v, want %v", side, got, want)
		}
	}
	if idle := podSide(t, s, "idle", wire.SideApp).ConnAges; sum(idle) != 0 {
		t.Errorf("idle pod has ages %v", idle)
	}

	// Closing the oldest group takes it out of both sides.
	old.close()
	want[ageBucket(s.Time.Sub(old.opened).Seconds())] -= uint64(old.n)
	deadline := time.Now().Add(10 * time.Second)
	for {
		s = ra.snapshot(t)
		app, proxy := podSide(t, s, "streams", wire.SideApp), podSide(t, s, "streams", wire.SideProxy)
		if sum(app.ConnAges) == 5 && sum(proxy.ConnAges) == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after closing 4 of 9 streams: app ages %v, proxy ages %v; want 5 each", app.ConnAges, proxy.ConnAges)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestConcurrentSnapshotsAgree takes snapshots from several goroutines at
// once, as a Prometheus scrape and the orchestrator's poll can, while a
// known number of streams stays open: every one must count each stream
// once (reads share the agent's buffers, so they must take turns). The
// streams' 1,200 sockets overflow the near socket table, so every read
// scans the far one too: a long read, which concurrent ones would overlap.
func TestConcurrentSnapshotsAgree(t *testing.T) {
	r := netrig.New(t)
	pods, res := rigPods(r, "many")
	pods["many"].StartStandin()
	ra := startAgent(t, ModeEBPF, res, nil)
	t.Cleanup(ra.client.CloseIdleConnections) // connections dialed ahead and never used
	const n = 600
	closeAll, err := pods["many"].Hold(fmt.Sprintf("%s:15006", pods["many"].IP), n)
	if err != nil {
		t.Fatalf("opening %d streams: %v", n, err)
	}
	t.Cleanup(closeAll)
	time.Sleep(200 * time.Millisecond) // the accepted ends reach ESTABLISHED in softirq

	const readers, rounds = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, readers*rounds)
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				errs <- ra.checkStreams("many", n)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// checkStreams fetches a snapshot and checks that both sides of pod have
// want streams in the age buckets. It reports rather than fails, so that
// goroutines can call it.
func (ra *runningAgent) checkStreams(pod string, want uint64) error {
	req, err := http.NewRequest(http.MethodGet, ra.url+"/v1/snapshot", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+ra.files.tokenValue)
	resp, err := ra.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var s wire.Snapshot
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return fmt.Errorf("decoding snapshot (HTTP %d): %w", resp.StatusCode, err)
	}
	got := map[wire.Side]uint64{}
	for _, p := range s.Pods {
		if p.Name == pod {
			got[p.Side] = sum(p.ConnAges)
		}
	}
	if got[wire.SideApp] != want || got[wire.SideProxy] != want {
		return fmt.Errorf("streams in the age buckets: app %d, proxy %d; want %d each", got[wire.SideApp], got[wire.SideProxy], want)
	}
	return nil
}
