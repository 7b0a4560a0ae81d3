package nodeagent

import (
	"testing"
	"time"

	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/test/netrig"
)

// medianBucket is the log2 bucket holding the median sample.
func medianBucket(h wire.Log2Histogram) int {
	total := sum(h.Buckets)
	var seen uint64
	for i, n := range h.Buckets {
		seen += n
		if seen*2 >= total && total > 0 {
			return i
		}
	}
	return -1
}

// TestConnectLatencyShiftsOnlyDelayedPods delays new connections of two pods
// by 20 ms on their path and checks that only their connect-latency
// histograms move to the 16–32 ms bucket.
func TestConnectLatencyShiftsOnlyDelayedPods(t *testing.T) {
	r := netrig.New(t)
	pods, res := rigPods(r, "slow-a", "slow-b", "fast")
	ra := startAgent(t, ModeEBPF, res, nil)
	delay := map[string]time.Duration{"slow-a": 20 * time.Millisecond, "slow-b": 20 * time.Millisecond, "fast": 0}
	var loads []*netrig.Load
	for n, d := range delay {
		target := pods[n].Wire(netrig.Link{SYNDelay: d})
		loads = append(loads, pods[n].StartLoad(netrig.LoadOptions{Target: target, Short: 2, ShortGap: 5 * time.Millisecond}))
	}
	time.Sleep(2 * time.Second)
	for _, l := range loads {
		if o := l.Stop(); o.Connects < 20 || o.Resets+o.Other != 0 {
			t.Fatalf("load did not run cleanly: %+v", o)
		}
	}
	s := ra.snapshot(t)
	const bucket20ms = 14 // [16384, 32768) µs
	for n, d := range delay {
		h := podSide(t, s, n, wire.SideApp).ConnectLatency
		m := medianBucket(h)
		t.Logf("%s (+%v): %d connects, median bucket %d, histogram %v", n, d, sum(h.Buckets), m, h.Buckets)
		switch {
		case d > 0 && m != bucket20ms:
			t.Errorf("%s: median connect latency in bucket %d, want %d (16–32 ms)", n, m, bucket20ms)
		case d == 0 && (m < 0 || m >= 11):
			t.Errorf("%s: median connect latency in bucket %d, want below 2 ms (bucket < 11)", n, m)
		}
	}
}

// TestRetransmittedSYNLatencyCountsFromFirstSYN loses each connection's
// first SYN on a pod's link, so the connect retransmits it after the
// kernel's 1 s SYN timeout. The handshake's own round trip (what the
// retransmitted SYN measures) is microseconds; the connect latency must
// count from the first SYN, about 1 s, and the retransmit is counted.
func TestRetransmittedSYNLatencyCountsFromFirstSYN(t *testing.T) {
	r := netrig.New(t)
	pods, res := rigPods(r, "syn-lost")
	ra := startAgent(t, ModeEBPF, res, nil)
	target := pods["syn-lost"].Wire(netrig.Link{DropFirstSYN: true})
	start := time.Now()
	closeAll, err := pods["syn-lost"].Hold(target, 1)
	if err != nil {
		t.Fatalf("connecting through the lossy link: %v", err)
	}
	took := time.Since(start)
	closeAll()
	if took < 900*time.Millisecond {
		t.Fatalf("the connect took %v: the link did not lose the first SYN", took)
	}
	c := podSide(t, ra.snapshot(t), "syn-lost", wire.SideApp)
	// 1 s and a little: [524288, 1048576) µs, or the next bucket should
	// the retransmit timer fire late.
	h := c.ConnectLatency.Buckets
	if n := sum(h); n != 1 || h[19]+h[20] != 1 {
		t.Errorf("connect latency histogram %v, want its one sample in bucket 19 or 20 (about 1 s; the connect took %v)", h, took)
	}
	if c.Retransmits < 1 {
		t.Errorf("retransmits %d, want the retransmitted SYN counted", c.Retransmits)
	}
}
