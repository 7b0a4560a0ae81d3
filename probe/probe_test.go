package probe

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"
)

// Three probes on loopback exchange requests and hold streams; then one
// stops, and the others count the failures.
func TestProbesOnLoopback(t *testing.T) {
	var addrs []string
	var probes []*Probe
	peers := func(context.Context) ([]string, error) { return addrs, nil }
	for range 3 {
		p, err := New(Config{Listen: "127.0.0.1:0", Peers: peers, Rate: 100, Streams: 2,
			StreamEvery: 50 * time.Millisecond, Timeout: time.Second, PeersEvery: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		p.cfg.Self = p.Addr().String()
		addrs = append(addrs, p.Addr().String())
		probes = append(probes, p)
	}
	ctxs := make([]context.CancelFunc, len(probes))
	var wg sync.WaitGroup
	for i, p := range probes {
		ctx, cancel := context.WithCancel(context.Background())
		ctxs[i] = cancel
		wg.Add(1)
		go func() { defer wg.Done(); _ = p.Run(ctx) }()
	}
	// Wait (not a timed assertion: the machine may be slow) for traffic.
	eventually(t, "every probe made and served requests and streamed", func() bool {
		for _, p := range probes {
			if s := p.Stats(); s.Requests < 50 || s.Served < 50 || s.StreamLines < 10 {
				return false
			}
		}
		return true
	})
	for i, p := range probes {
		s := p.Stats()
		t.Logf("probe %d: %+v", i, s)
		if s.RequestFailures != 0 || s.StreamBreaks != 0 {
			t.Errorf("probe %d failed while every peer is up: %+v", i, s)
		}
	}
	// Probe 2 stops: the others' requests to it fail, and their streams to it
	// break (stream 0 of probe 0 and stream 1 of probe 1 went to it).
	ctxs[2]()
	before := []Stats{probes[0].Stats(), probes[1].Stats()}
	eventually(t, "the others count failed requests and broken streams", func() bool {
		for i := range 2 {
			s := probes[i].Stats()
			if s.RequestFailures <= before[i].RequestFailures || s.StreamBreaks == 0 {
				return false
			}
		}
		return true
	})
	ctxs[0]()
	ctxs[1]()
	wg.Wait()
	// Stopped probes no longer listen.
	if c, err := net.DialTimeout("tcp", addrs[0], 200*time.Millisecond); err == nil {
		c.Close()
		t.Error("a stopped probe still accepts connections")
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	peers := func(context.Context) ([]string, error) { return nil, nil }
	for _, c := range []Config{
		{},
		{Peers: peers, Rate: -1, Listen: "127.0.0.1:0"},
		{Peers: peers, Streams: 1000, Listen: "127.0.0.1:0"},
		{Peers: peers, Listen: "256.0.0.1:1"},
	} {
		if p, err := New(c); err == nil {
			p.ln.Close()
			t.Errorf("New(%+v) accepted bad input", c)
		}
	}
}

func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("timed out waiting until %s", what)
}
