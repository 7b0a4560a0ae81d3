package bpf

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nodewise/nodewise/test/netrig"
)

// TestCountersSpillToHashWhenBlocksRunOut loads the programs with a single
// counter block, so at most one key (whichever counts first: the host's
// namespace is busy too) gets it and the others count in the per-CPU hash,
// and checks that every pod's connects, accepts and SRTT samples are counted
// exactly once either way.
func TestCountersSpillToHashWhenBlocksRunOut(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to load eBPF: skipping")
	}
	r := netrig.New(t)
	p, err := load(1, false)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	defer p.Close()
	want := map[Key]uint64{}
	for i, n := range []int{3, 5, 7} {
		pod := r.AddPod(fmt.Sprintf("spill-%d", i))
		pod.ListenEcho(t, 8080, false)
		closeAll, err := pod.Hold(fmt.Sprintf("%s:8080", pod.IP), n)
		if err != nil {
			t.Fatalf("opening %d connections: %v", n, err)
		}
		closeAll()
		want[Key{Netns: pod.Inode, Side: SideApp}] = uint64(n)
	}
	// The closes finish in softirq: wait for the last SRTT samples.
	var cs map[Key]*Counters
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if cs, err = p.ReadCounters(); err != nil {
			t.Fatal(err)
		}
		if allSampled(cs, want) || time.Now().After(deadline) {
			break
		}
	}
	for k, n := range want {
		c := cs[k]
		if c == nil {
			t.Errorf("namespace %d: no counters", k.Netns)
			continue
		}
		if c.Connects != n || c.Accepts != n || sum(c.SRTT[:]) != 2*n {
			t.Errorf("namespace %d: connects %d, accepts %d, SRTT samples %d; want %d, %d, %d",
				k.Netns, c.Connects, c.Accepts, sum(c.SRTT[:]), n, n, 2*n)
		}
	}
	var blocked int
	var k NodewiseCounterKey
	var b uint32
	for it := p.objs.CounterIndex.Iterate(); it.Next(&k, &b); {
		blocked++
	}
	if blocked > 1 {
		t.Errorf("%d keys have a counter block, want at most the 1 there is", blocked)
	}
}

func allSampled(cs map[Key]*Counters, want map[Key]uint64) bool {
	for k, n := range want {
		if c := cs[k]; c == nil || sum(c.SRTT[:]) < 2*n {
			return false
		}
	}
	return true
}

func sum(xs []uint64) uint64 {
	var s uint64
	for _, x := range xs {
		s += x
	}
	return s
}
