package bpf

import (
	"net"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/nodewise/nodewise/test/netrig"
	"github.com/nodewise/nodewise/test/testkit"
)

// BenchmarkProgramsLoopbackChurn opens and closes b.N loopback connections
// with the programs attached and the kernel's run-time stats on, and reports
// each program's mean cost per run and the programs' time per connection.
func BenchmarkProgramsLoopbackChurn(b *testing.B) {
	testkit.RequireRoot(b, "load eBPF")
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		b.Fatalf("enabling BPF stats: %v", err)
	}
	defer stats.Close()
	p, err := Load()
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	addr := netrig.LoopbackSink(b)
	n := b.N
	if n < 20000 {
		n = 20000
	}
	b.ResetTimer()
	for range n {
		c, err := net.Dial("tcp4", addr)
		if err != nil {
			continue
		}
		c.Close()
	}
	b.StopTimer()
	var total int64
	for name, prog := range p.Programs() {
		st, err := prog.Stats()
		if err != nil || st.RunCount == 0 {
			continue
		}
		total += st.Runtime.Nanoseconds()
		b.ReportMetric(float64(st.Runtime.Nanoseconds())/float64(st.RunCount), "ns/run-"+name)
		b.ReportMetric(float64(st.RunCount)/float64(n), "runs/conn-"+name)
		// Runs the kernel skipped because the program was already
		// running on that CPU: their events went uncounted.
		b.ReportMetric(float64(st.RecursionMisses), "skipped-runs-"+name)
	}
	b.ReportMetric(float64(total)/float64(n), "bpf-ns/conn")
}
