package bench

import (
	"net"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/nodewise/nodewise/bpf"
	"github.com/nodewise/nodewise/test/netrig"
	"github.com/nodewise/nodewise/test/testkit"
)

func TestRunTimesQuantile(t *testing.T) {
	h := make(RunTimes, runBuckets)
	h[20] = 50                 // [40, 42) ns
	h[50] = 50                 // [100, 102) ns
	h[runFineBuckets+12] = 100 // [4096, 8192) ns
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.125, 41}, {0.25, 42}, {0.375, 101}, {0.5, 102}, {0.75, 6144}} {
		if got := h.Quantile(c.q); got != c.want {
			t.Errorf("Quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if n := h.Add(h).Count(); n != 400 {
		t.Errorf("Count after adding to itself = %d, want 400", n)
	}
}

// TestTimedBuildTimesEveryRun checks that the timed build files one
// duration per run of the state program (as the kernel counts them) and
// that the empty timed program runs on the same hook.
func TestTimedBuildTimesEveryRun(t *testing.T) {
	testkit.RequireRoot(t, "load eBPF")
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		t.Fatalf("enabling BPF stats: %v", err)
	}
	defer stats.Close()
	p, err := LoadTimed()
	if err != nil {
		t.Fatalf("LoadTimed: %v", err)
	}
	defer p.Close()
	addr := netrig.LoopbackSink(t)
	connect := func(n int) {
		for range n {
			if c, err := net.Dial("tcp4", addr); err == nil {
				c.Close()
			}
		}
	}
	connect(200)
	time.Sleep(500 * time.Millisecond) // the last closes finish in softirq
	// The program sees every socket of the host, and other test packages
	// run beside this one: read the kernel's count before and after the
	// histogram, and every run counted before must be timed, and no timed
	// run may be missing from the count after.
	prog := p.Programs()[bpf.NodewiseProgInetSockSetState]
	before, err := prog.Stats()
	if err != nil {
		t.Fatal(err)
	}
	h, err := p.RunTimes()
	if err != nil {
		t.Fatal(err)
	}
	after, err := prog.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if h.Count() < before.RunCount || h.Count() > after.RunCount || h.Count() < 200*8 {
		t.Errorf("timed %d runs, the kernel ran the program %d to %d times while they were read (200 connections)", h.Count(), before.RunCount, after.RunCount)
	}
	// As above, the sink's side of the last connections closes in its own
	// goroutine and softirq: wait for it before the program is detached (at
	// load 5 the count came out at 332 of the ≥ 400 without the wait).
	empty, err := TimeEmptyRuns(func() { connect(50); time.Sleep(500 * time.Millisecond) })
	if err != nil {
		t.Fatal(err)
	}
	if empty.Count() < 50*8 || empty.Quantile(0.5) <= 0 {
		t.Errorf("the empty timed program: %d runs, median %v", empty.Count(), empty.Quantile(0.5))
	}
	t.Logf("state program: %d runs, median %v; empty: %d runs, median %v", h.Count(), h.Quantile(0.5), empty.Count(), empty.Quantile(0.5))
}
