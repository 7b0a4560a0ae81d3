package nodeagent

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/nodewise/nodewise/bpf/bench"
	"github.com/nodewise/nodewise/test/netrig"
)

// reportChurn reports c's rounds as metrics and prints one line for c.
func reportChurn(b *testing.B, c churnCase, rounds []churnRound) {
	var (
		d50, d99, rateA, rateB []float64
		cpu, wall              time.Duration
		statsWall              time.Duration
		kernelTime             time.Duration
		progs                  = map[string]ebpf.ProgramStats{}
		peakRSS, offRuns       uint64
		agentConnects, nConns  uint64
		statsConns, failed     int
		why                    = map[string]int{}
		floorRuns              uint64
		floorTime              time.Duration
		timed, emptyTimed      bench.RunTimes
		snapTook               []time.Duration
		snapBytes              int
		roundLogs              []string
	)
	for i, rd := range rounds {
		for name, st := range rd.progs {
			p := progs[name]
			p.RunCount += st.RunCount
			p.Runtime += st.Runtime
			p.RecursionMisses += st.RecursionMisses
			progs[name] = p
			kernelTime += st.Runtime
		}
		cpu, wall = cpu+rd.cpu, wall+rd.wall
		statsWall += rd.statsWall
		peakRSS, offRuns = max(peakRSS, rd.peakRSS), offRuns+rd.offRuns
		agentConnects += rd.agentConnects
		nConns += uint64(rd.b.Connected + rd.bStats.Connected)
		statsConns += rd.bStats.Conns
		for _, l := range []netrig.Churned{rd.a, rd.b, rd.bStats} {
			failed += l.Failed
			for err, n := range l.Why {
				why[err] += n
			}
		}
		floorRuns, floorTime = floorRuns+rd.floorRuns, floorTime+rd.floorTime
		timed, emptyTimed = timed.Add(rd.timed), emptyTimed.Add(rd.emptyTimed)
		snapTook = append(snapTook, rd.snapTook...)
		for _, n := range rd.snapBytes {
			snapBytes = max(snapBytes, n)
		}
		d50 = append(d50, float64(netrig.Quantile(rd.b.Lat, 0.5)-netrig.Quantile(rd.a.Lat, 0.5))/1e3)
		d99 = append(d99, float64(netrig.Quantile(rd.b.Lat, 0.99)-netrig.Quantile(rd.a.Lat, 0.99))/1e3)
		rateA, rateB = append(rateA, rd.a.Rate()), append(rateB, rd.b.Rate())
		roundLogs = append(roundLogs, fmt.Sprintf("round %d: A p50 %v p99 %v, %.0f conns/s | B p50 %v p99 %v, %.0f conns/s",
			i, netrig.Quantile(rd.a.Lat, 0.5), netrig.Quantile(rd.a.Lat, 0.99), rd.a.Rate(), netrig.Quantile(rd.b.Lat, 0.5), netrig.Quantile(rd.b.Lat, 0.99), rd.b.Rate()))
	}
	names := make([]string, 0, len(progs))
	for name := range progs {
		names = append(names, name)
	}
	sort.Strings(names)
	var progLogs, progLine []string
	var allRuns uint64
	for _, name := range names {
		st := progs[name]
		allRuns += st.RunCount
		if st.RunCount == 0 {
			continue
		}
		per := float64(st.Runtime.Nanoseconds()) / float64(st.RunCount)
		b.ReportMetric(per, "ns/run-"+name)
		b.ReportMetric(float64(st.RunCount), "runs-"+name)
		progLine = append(progLine, fmt.Sprintf("%s %.0f ns/run × %d", name, per, st.RunCount))
		// A run that would have started while the same program ran on
		// that CPU (a softirq interrupting a system call's run) is
		// skipped by the kernel: its event is not counted.
		progLogs = append(progLogs, fmt.Sprintf("program %-20s runs %8d  run_time %12v  %6.0f ns/run (mean), %d runs skipped (recursion)", name, st.RunCount, st.Runtime, per, st.RecursionMisses))
	}
	cpuShare := float64(cpu) / float64(wall) * 100
	kernelShare := float64(kernelTime) / float64(statsWall) * 100
	perConn := float64(kernelTime.Nanoseconds()) / float64(max(statsConns, 1))
	runsPerConn := float64(allRuns) / float64(max(statsConns, 1))
	floor := float64(floorTime.Nanoseconds()) / float64(max(floorRuns, 1))
	// Time per connection × a rate, as a share of one core: with the
	// accounting's own clock reads, and without them (they cost nothing
	// when the statistics are off, as in production). 5,000 a second is
	// the rate the issue first set; the offered rate is this case's.
	at5k := perConn * 5000 / 1e9 * 100
	at5kNet := (perConn - floor*runsPerConn) * 5000 / 1e9 * 100
	atOffered := perConn * c.rate / 1e9 * 100
	atOfferedNet := (perConn - floor*runsPerConn) * c.rate / 1e9 * 100
	achieved, alone := median(rateB), median(rateA)
	b.ReportMetric(c.rate, "offered-conns/s")
	b.ReportMetric(achieved, "conns/s")
	b.ReportMetric(alone, "no-agent-conns/s")
	// The programs run synchronously on the connect path, so their
	// time per connection bounds what they add to it, free of the
	// scheduling noise that dominates the A/B figures on a busy host.
	b.ReportMetric(perConn, "bpf-ns/conn")
	b.ReportMetric(floor, "stats-floor-ns/run")
	// The median run as the kernel would account it: the timed median,
	// less what timing adds (the empty timed program's median), plus the
	// accounting floor.
	p50 := float64(timed.Quantile(0.5))
	emptyP50 := float64(emptyTimed.Quantile(0.5))
	b.ReportMetric(p50, "timed-p50-ns/run")
	b.ReportMetric(p50-emptyP50+floor, "est-accounted-p50-ns/run")
	b.ReportMetric(at5k, "bpf-%core-at-5k/s")
	b.ReportMetric(atOffered, "bpf-%core-at-offered")
	b.ReportMetric(cpuShare, "agent-cpu-%core")
	b.ReportMetric(kernelShare, "bpf-cpu-%core")
	b.ReportMetric(float64(peakRSS)/(1<<20), "agent-peak-rss-MiB")
	b.ReportMetric(float64(snapBytes), "snapshot-bytes")
	b.ReportMetric(float64(netrig.Quantile(snapTook, 0.5))/1e6, "snapshot-serve-ms")
	b.ReportMetric(median(d50), "added-connect-p50-µs")
	b.ReportMetric(median(d99), "added-connect-p99-µs")

	// The host is shared: its load says how far figures from different
	// runs compare.
	la := "?"
	if raw, err := os.ReadFile("/proc/loadavg"); err == nil {
		la = strings.Join(strings.Fields(string(raw))[:3], " ")
	}
	fmt.Printf("churn %v: offered %.0f/s, achieved %.0f/s with the agent (%.0f/s without; %d connections failed) | programs (stats on): %s | agent (B, stats off, as production) %.2f%% of a core | peak RSS %.1f MiB | snapshot %d bytes at %d pods, served in %v (median of %d, max %v) | load %s\n",
		c, c.rate, achieved, alone, failed, strings.Join(progLine, ", "), cpuShare,
		float64(peakRSS)/(1<<20), snapBytes, c.pods, netrig.Quantile(snapTook, 0.5).Round(time.Microsecond), len(snapTook), netrig.Quantile(snapTook, 1).Round(time.Microsecond), la)
	// One machine-readable line: the agent's CPU is its user space (B,
	// statistics off) plus the programs' time per connection less the
	// accounting floor (B′), at the achieved rate; lost is client
	// connects the agent did not count (B and B′).
	bpfShare := max(perConn-floor*runsPerConn, 0) * achieved / 1e9 * 100
	fmt.Printf("agent rate_offered=%.0f rate_achieved=%.0f cpu_pct=%.2f user_pct=%.2f bpf_pct=%.2f rss_mib=%.1f pods=%d lost=%d load=%s\n",
		c.rate, achieved, cpuShare+bpfShare, cpuShare, bpfShare, float64(peakRSS)/(1<<20), c.pods, int64(nConns)-int64(agentConnects), strings.ReplaceAll(la, " ", ","))
	if achieved < 0.95*c.rate {
		fmt.Printf("NOTE %v: the load generator reached %.0f/s of the %.0f/s offered (%.0f%%; %.0f/s with no agent) on this machine's %d CPUs: the figures are at the achieved rate\n",
			c, achieved, c.rate, achieved/c.rate*100, alone, runtime.NumCPU())
	}
	if failed > 0 {
		fmt.Printf("NOTE %v: %d connections failed in A, B and B': %v\n", c, failed, why)
	}
	if offRuns > 0 {
		fmt.Printf("NOTE %v: the kernel accounted %d runs in B, with the statistics meant to be off: something else held them on\n", c, offRuns)
	}
	b.Logf("agent: %.2f%% of one core in user space (B, statistics off); programs %.2f%% of one core in the kernel (B'); peak RSS %.1f MiB",
		cpuShare, kernelShare, float64(peakRSS)/(1<<20))
	b.Logf("added connect latency (median over %d rounds of B−A): p50 %+.1f µs, p99 %+.1f µs; per-round p50 %v", len(rounds), median(d50), median(d99), d50)
	b.Logf("in-kernel program time per connection (client and server side together): %.0f ns over %.1f runs", perConn, runsPerConn)
	b.Logf("the kernel's accounting floor (an empty program on the same hook, same churn): %.1f ns/run", floor)
	b.Logf("inet_sock_set_state timed from inside (timed build, %d runs): p25 %v, p50 %v, p75 %v, p90 %v, p99 %v; an empty program timed the same way: p50 %v",
		timed.Count(), timed.Quantile(0.25), timed.Quantile(0.5), timed.Quantile(0.75), timed.Quantile(0.9), timed.Quantile(0.99), emptyTimed.Quantile(0.5))
	b.Logf("median run as the kernel would account it (timed p50 − empty timed p50 + floor): %.0f ns", p50-emptyP50+floor)
	b.Logf("programs' share of one core as accounted (and without the accounting's clock reads): %.2f%% (%.2f%%) at 5,000 new conns/s, %.2f%% (%.2f%%) at the %.0f offered",
		at5k, at5kNet, atOffered, atOfferedNet, c.rate)
	b.Logf("with the agent: %.0f new conns/s (median round); the agent counted %d of the %d client connects", achieved, agentConnects, nConns)
	for _, l := range append(progLogs, roundLogs...) {
		b.Log(l)
	}
}
