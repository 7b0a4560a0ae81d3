package bench

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/nodewise/nodewise/bpf"
	"github.com/nodewise/nodewise/test/netrig"
)

// medianWindow is how often BenchmarkProgramRunTime reads the kernel's
// statistics: each window's mean run time is one sample of the median.
const medianWindow = 100 * time.Millisecond

// BenchmarkProgramRunTime is make bench-ebpf: the production programs and
// the accounting floor (count_only, a program that only bumps a per-CPU
// counter) attached together to inet_sock_set_state, under short
// connections from 110 pod namespaces to their own echo servers at 20,000
// and 50,000 new connections a second offered. The kernel's run-time
// statistics (bpf_enable_stats: run_time_ns and run_cnt) are read for both
// every medianWindow; a window's mean is its run time over its runs, of
// all the production programs together and of the floor. The median is
// the median of those window means (the kernel gives no single run's
// time), and the ratio is the production median over the floor's, both
// over the same events. Then, under the same load, the timed build gives
// the median of single runs as its own clock reads see them, beside an
// empty program timed the same way. It prints one line a rate:
//
//	ebpf median_ns=… floor_ns=… ratio=… rate=… achieved=… mean_ns=… runs=… windows=… ns_per_conn=… runs_per_conn=… progs=name:mean_nsxruns,… timed_p50_ns=… empty_timed_p50_ns=… gen_cpu_us_per_conn=… failed=… load=…
func BenchmarkProgramRunTime(b *testing.B) {
	netrig.RequireKernel(b)
	pods := netrig.New(b).AddEchoPods("ebpf", 110, 8080)
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		b.Fatalf("enabling BPF run-time stats: %v", err)
	}
	defer stats.Close()
	for _, rate := range []float64{20000, 50000} {
		b.Run(fmt.Sprintf("rate=%.0f", rate), func(b *testing.B) {
			for range b.N {
				runTimeAt(b, pods, rate)
			}
		})
	}
}

func runTimeAt(b *testing.B, pods []*netrig.Pod, rate float64) {
	p, err := bpf.Load()
	if err != nil {
		b.Fatal(err)
	}
	floor, err := attachFloor()
	if err != nil {
		p.Close()
		b.Fatal(err)
	}
	netrig.Churn(pods, 8080, rate, time.Second) // warm up
	progs := p.Programs()
	perProg := func() map[string]ebpf.ProgramStats {
		out := map[string]ebpf.ProgramStats{}
		for name, prog := range progs {
			if st, err := prog.Stats(); err == nil {
				out[name] = *st
			}
		}
		return out
	}
	read := func() (real, fl ebpf.ProgramStats) {
		for _, st := range perProg() {
			real.RunCount += st.RunCount
			real.Runtime += st.Runtime
		}
		if st, err := floor.prog.Stats(); err == nil {
			fl = *st
		}
		return real, fl
	}
	var (
		realMeans, floorMeans []float64
		first, last           [2]ebpf.ProgramStats
		done                  = make(chan struct{})
		wg                    sync.WaitGroup
	)
	first[0], first[1] = read()
	firstProgs := perProg()
	wg.Add(1)
	go func() {
		defer wg.Done()
		prevReal, prevFloor := first[0], first[1]
		tick := time.NewTicker(medianWindow)
		defer tick.Stop()
		for {
			select {
			case <-done:
				last[0], last[1] = read()
				return
			case <-tick.C:
			}
			real, fl := read()
			dr, df := real.RunCount-prevReal.RunCount, fl.RunCount-prevFloor.RunCount
			if dr > 0 && df > 0 {
				realMeans = append(realMeans, float64(real.Runtime-prevReal.Runtime)/float64(dr))
				floorMeans = append(floorMeans, float64(fl.Runtime-prevFloor.Runtime)/float64(df))
			}
			prevReal, prevFloor = real, fl
		}
	}()
	l := netrig.Churn(pods, 8080, rate, 4*time.Second)
	close(done)
	wg.Wait()
	// Every production program's mean run and runs over the churn.
	var byProg []string
	for name, st := range perProg() {
		runs := st.RunCount - firstProgs[name].RunCount
		if runs == 0 {
			byProg = append(byProg, name+":0")
			continue
		}
		byProg = append(byProg, fmt.Sprintf("%s:%.1fx%d", name, float64(st.Runtime-firstProgs[name].Runtime)/float64(runs), runs))
	}
	sort.Strings(byProg)
	p.Close()
	floor.Close()
	// The distribution of single runs, which the kernel's statistics
	// cannot give: the timed build (its state program reads the clock at
	// entry and exit) under the same load, then an empty program timed
	// the same way (what the timing adds).
	timed, err := LoadTimed()
	if err != nil {
		b.Fatal(err)
	}
	netrig.Churn(pods, 8080, rate, 2*time.Second)
	runs1, err := timed.RunTimes()
	timed.Close()
	if err != nil {
		b.Fatal(err)
	}
	empty, err := TimeEmptyRuns(func() { netrig.Churn(pods, 8080, rate, 2*time.Second) })
	if err != nil {
		b.Fatal(err)
	}
	if len(realMeans) == 0 {
		b.Fatalf("no window saw both the programs and the floor run")
	}
	med, fmed := medianOf(realMeans), medianOf(floorMeans)
	runs := last[0].RunCount - first[0].RunCount
	mean := float64(last[0].Runtime-first[0].Runtime) / float64(max(runs, 1))
	b.ReportMetric(med, "median-ns/run")
	b.ReportMetric(fmed, "floor-ns/run")
	b.ReportMetric(med/fmed, "ratio")
	b.ReportMetric(l.Rate(), "conns/s")
	tp50, ep50 := float64(runs1.Quantile(0.5)), float64(empty.Quantile(0.5))
	b.ReportMetric(tp50, "timed-p50-ns/run")
	// Per connection: the programs' time (all of them, statistics on),
	// and the generator's CPU, both ends' system calls and the kernel's
	// work for them included (what bounds the rate it can offer).
	perConn := float64(last[0].Runtime-first[0].Runtime) / float64(max(l.Conns, 1))
	fmt.Printf("ebpf median_ns=%.1f floor_ns=%.1f ratio=%.2f rate=%.0f achieved=%.0f mean_ns=%.1f runs=%d windows=%d ns_per_conn=%.0f runs_per_conn=%.1f progs=%s timed_p50_ns=%.0f empty_timed_p50_ns=%.0f gen_cpu_us_per_conn=%.1f failed=%d load=%s\n",
		med, fmed, med/fmed, rate, l.Rate(), mean, runs, len(realMeans), perConn, float64(runs)/float64(max(l.Conns, 1)),
		strings.Join(byProg, ","), tp50, ep50, float64(l.CPUPerConn())/1e3, l.Failed, loadAvg())
}

// floorProg is the count_only program of the timed build, attached.
type floorProg struct {
	prog *ebpf.Program
	runs *ebpf.Map
	l    link.Link
}

func attachFloor() (*floorProg, error) {
	spec, err := LoadNodewiseRunprof()
	if err != nil {
		return nil, err
	}
	var objs struct {
		Prog *ebpf.Program `ebpf:"count_only"`
		Runs *ebpf.Map     `ebpf:"floor_runs"`
	}
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return nil, fmt.Errorf("loading the floor program: %w", err)
	}
	l, err := link.AttachTracing(link.TracingOptions{Program: objs.Prog})
	if err != nil {
		objs.Prog.Close()
		objs.Runs.Close()
		return nil, fmt.Errorf("attaching the floor program: %w", err)
	}
	return &floorProg{prog: objs.Prog, runs: objs.Runs, l: l}, nil
}

func (f *floorProg) Close() {
	f.l.Close()
	f.prog.Close()
	f.runs.Close()
}

func medianOf(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func loadAvg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(raw))[:3], ",")
}
