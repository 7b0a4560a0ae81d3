package bpf

import (
	"fmt"
	"testing"
	"time"

	"github.com/nodewise/nodewise/test/netrig"
	"github.com/nodewise/nodewise/test/testkit"
)

// TestCountersSpillToHashWhenBlocksRunOut loads the programs with a single
// counter block, so at most one key (whichever counts first: the host's
// namespace is busy too) gets it and the others count in the per-CPU hash,
// and checks that every pod's connects, accepts and SRTT samples are counted
// exactly once either way.
func TestCountersSpillToHashWhenBlocksRunOut(t *testing.T) {
	r := netrig.New(t)
	p := loadForTest(t, 1)
	want := map[Key]uint64{}
	for i, n := range []int{3, 5, 7} {
		want[connectAndClose(t, r, fmt.Sprintf("spill-%d", i), n)] = uint64(n)
	}
	cs := readWhenSampled(t, p, want)
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

// TestCountersOfKeysThatArriveBetweenReads reads the counters, lets a new
// namespace count, and reads again: the agent keeps the key of every
// counter block between reads, and must notice the blocks handed out
// since.
func TestCountersOfKeysThatArriveBetweenReads(t *testing.T) {
	r := netrig.New(t)
	p := loadForTest(t, 0)
	want := map[Key]uint64{}
	for i, n := range []int{2, 4} {
		want[connectAndClose(t, r, fmt.Sprintf("later-%d", i), n)] = uint64(n)
		cs := readWhenSampled(t, p, want)
		for k, n := range want {
			if c := cs[k]; c == nil || c.Connects != n || c.Accepts != n {
				t.Errorf("read %d, namespace %d: %+v; want %d connects and accepts", i+1, k.Netns, c, n)
			}
		}
	}
}

// loadForTest loads the programs for a test that needs root, with the
// given number of counter blocks (0: as Load sizes them), and closes them
// when the test ends.
func loadForTest(t *testing.T, blocks uint32) *Probe {
	t.Helper()
	testkit.RequireRoot(t, "load eBPF")
	var err error
	if blocks == 0 {
		if blocks, err = counterBlocks(); err != nil {
			t.Fatal(err)
		}
	}
	spec, err := LoadNodewise()
	if err != nil {
		t.Fatal(err)
	}
	p, err := load(spec, blocks, nil)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// connectAndClose makes n connections to an echo server in a new pod
// namespace, closes them, and returns the key they count under.
func connectAndClose(t *testing.T, r *netrig.Rig, name string, n int) Key {
	t.Helper()
	pod := r.AddPod(name)
	pod.ListenEcho(t, 8080, false)
	closeAll, err := pod.Hold(fmt.Sprintf("%s:8080", pod.IP), n)
	if err != nil {
		t.Fatalf("opening %d connections: %v", n, err)
	}
	closeAll()
	return Key{Netns: pod.Inode, Side: SideApp}
}

// readWhenSampled reads the counters once every key in want has its SRTT
// samples (two per connection: the closes finish in softirq), or after 5 s.
func readWhenSampled(t *testing.T, p *Probe, want map[Key]uint64) map[Key]*Counters {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		cs, err := p.ReadCounters()
		if err != nil {
			t.Fatal(err)
		}
		if allSampled(cs, want) || time.Now().After(deadline) {
			return cs
		}
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
