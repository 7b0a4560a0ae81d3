package nodeagent

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/nodewise/nodewise/bpf/bench"
	"github.com/nodewise/nodewise/test/netrig"
)

// nodewisePrograms finds the agent's programs loaded after minID.
func nodewisePrograms(minID ebpf.ProgramID) (map[string]*ebpf.Program, error) {
	names := map[string]bool{"tcp_send_reset": true, "tcp_receive_reset": true, "tcp_retransmit_skb": true, "inet_sock_set_state": true}
	out := map[string]*ebpf.Program{}
	id := minID
	for {
		next, err := ebpf.ProgramGetNextID(id)
		if err != nil {
			break
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue
		}
		info, err := p.Info()
		if err != nil || !names[info.Name] {
			p.Close()
			continue
		}
		out[info.Name] = p
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no nodewise programs with id > %d", minID)
	}
	return out, nil
}

func maxProgramID() ebpf.ProgramID {
	var id ebpf.ProgramID
	for {
		next, err := ebpf.ProgramGetNextID(id)
		if err != nil {
			return id
		}
		id = next
	}
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// churnCase is one load BenchmarkAgentConnectionChurn offers.
type churnCase struct {
	rate   float64 // new connections a second offered, all pods together
	pods   int
	rounds int
}

func (c churnCase) String() string { return fmt.Sprintf("rate=%.0f/pods=%d", c.rate, c.pods) }

// churnPhase is how long A and B run in each round; B', C, D and E run half
// as long.
const churnPhase = 2 * time.Second

// BenchmarkAgentConnectionChurn offers short connections from pod network
// namespaces, each pod to its own echo server, at three loads: 7,000 new
// connections a second across 50 pods, and a busy node's 20,000 and 50,000
// across 110 (the kubelet's default pod limit). Each load runs in rounds of
// A (no agent), B (the agent as a separate process, eBPF mode, its snapshot
// polled once a second, the kernel's BPF run-time statistics off, as in
// production), B' (the same agent with the statistics on), C (an empty
// program on the same hook), D and E (the timed build and an empty program
// timed the same way). It reports the rate achieved against the rate
// offered, the programs' cost from the kernel's statistics (B'), the
// agent's CPU share (B, from its own rusage) and peak RSS, the snapshot's
// size and serving time, and the connect latency the agent adds (median over
// rounds of B minus A, so machine noise hits both sides alike).
func BenchmarkAgentConnectionChurn(b *testing.B) {
	cases := []churnCase{
		{rate: 7000, pods: 50, rounds: 5},
		{rate: 20000, pods: 110, rounds: 3},
		{rate: 50000, pods: 110, rounds: 3},
	}
	pods := netrig.New(b).AddEchoPods("bench", 110, 8080)
	files := writeTLSFiles(b)
	// Statistics someone else turned on stay on through B: say so.
	if on, err := os.ReadFile("/proc/sys/kernel/bpf_stats_enabled"); err == nil && strings.TrimSpace(string(on)) != "0" {
		fmt.Println("NOTE: kernel.bpf_stats_enabled is 1: B runs with the BPF statistics on, not as production does")
	}
	for _, c := range cases {
		b.Run(c.String(), func(b *testing.B) {
			for range b.N {
				reportChurn(b, c, churnRounds(b, c, pods[:c.pods], files))
			}
		})
	}
}

// churnRound is what one round of A, B, B', C, D and E measured.
type churnRound struct {
	a, b, bStats netrig.Churned
	// The agent's CPU (rusage) and the wall time over B; the wall time
	// of B'.
	cpu, wall, statsWall time.Duration
	progs                map[string]ebpf.ProgramStats // B'
	// offRuns are runs the kernel accounted during B: none unless
	// something else held the statistics on.
	offRuns       uint64
	peakRSS       uint64
	agentConnects uint64
	snapBytes     []int
	snapTook      []time.Duration
	// C, D and E.
	floorRuns         uint64
	floorTime         time.Duration
	timed, emptyTimed bench.RunTimes
}

// churnRounds warms up and runs c's rounds.
func churnRounds(b *testing.B, c churnCase, pods []*netrig.Pod, files tlsFiles) []churnRound {
	podMap := map[uint32]Pod{}
	for _, p := range pods {
		podMap[p.Inode] = Pod{Namespace: "bench", Name: p.PodName, UID: p.Name}
	}
	netrig.Churn(pods, 8080, c.rate, time.Second) // warm up
	var rounds []churnRound
	for range c.rounds {
		rounds = append(rounds, runChurnRound(b, c, pods, podMap, files))
	}
	return rounds
}

func runChurnRound(b *testing.B, c churnCase, pods []*netrig.Pod, podMap map[uint32]Pod, files tlsFiles) churnRound {
	var rd churnRound
	rd.a = netrig.Churn(pods, 8080, c.rate, churnPhase)

	minID := maxProgramID()
	ap := startAgentProcess(b, files, podMap)
	t0 := time.Now()
	// The TLS handshake first, so that the polls below time the serving.
	ap.ra.snapshot(b)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		end := time.After(churnPhase)
		for {
			select {
			case <-tick.C:
				_, n, took := ap.ra.timedSnapshot(b)
				rd.snapBytes, rd.snapTook = append(rd.snapBytes, n), append(rd.snapTook, took)
			case <-end:
				return
			}
		}
	}()
	rd.b = netrig.Churn(pods, 8080, c.rate, churnPhase)
	<-done
	_, n, took := ap.ra.timedSnapshot(b)
	rd.snapBytes, rd.snapTook = append(rd.snapBytes, n), append(rd.snapTook, took)
	cpu, err := ap.cpu()
	if err != nil {
		b.Fatal(err)
	}
	rd.cpu, rd.wall = cpu, time.Since(t0)

	// B': the statistics on, the same agent.
	progs, err := nodewisePrograms(minID)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		for _, p := range progs {
			p.Close()
		}
	}()
	before := programStats(progs)
	for _, st := range before {
		rd.offRuns += st.RunCount
	}
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		b.Fatalf("enabling BPF run-time stats: %v", err)
	}
	defer stats.Close()
	t1 := time.Now()
	rd.bStats = netrig.Churn(pods, 8080, c.rate, churnPhase/2)
	rd.progs = programStats(progs)
	for name, st := range rd.progs {
		st.RunCount -= before[name].RunCount
		st.Runtime -= before[name].Runtime
		st.RecursionMisses -= before[name].RecursionMisses
		rd.progs[name] = st
	}
	for _, p := range ap.ra.snapshot(b).Pods {
		rd.agentConnects += p.Connects
	}
	rd.peakRSS, _ = procPeakRSS(ap.cmd.Process.Pid)
	rd.statsWall = time.Since(t1)
	ap.stop()

	// C: the kernel's own cost of accounting a run (two clock reads), on
	// the same hook under the same churn: an empty program's mean per run.
	rd.floorRuns, rd.floorTime = emptyProgramCost(b, func() { netrig.Churn(pods, 8080, c.rate, churnPhase/2) })
	// D and E: the timed build (in this process) and an empty program
	// timed the same way: the distribution of run times, which the
	// kernel's mean hides, and what timing adds.
	rd.timed, rd.emptyTimed = timedRuns(b, func() { netrig.Churn(pods, 8080, c.rate, churnPhase/2) })
	return rd
}

// programStats reads each program's statistics so far.
func programStats(progs map[string]*ebpf.Program) map[string]ebpf.ProgramStats {
	out := map[string]ebpf.ProgramStats{}
	for name, p := range progs {
		if st, err := p.Stats(); err == nil {
			out[name] = *st
		}
	}
	return out
}

// emptyProgramCost attaches a program that does nothing to the hook the
// agent's busiest program uses, runs work, and returns the runs and run
// time the kernel accounted to it: the floor every program's mean per run
// includes while run-time statistics are on.
func emptyProgramCost(b *testing.B, work func()) (uint64, time.Duration) {
	b.Helper()
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "empty_state",
		Type:         ebpf.Tracing,
		AttachType:   ebpf.AttachTraceRawTp,
		AttachTo:     "inet_sock_set_state",
		License:      "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		b.Fatalf("loading the empty program: %v", err)
	}
	defer p.Close()
	l, err := link.AttachTracing(link.TracingOptions{Program: p})
	if err != nil {
		b.Fatalf("attaching the empty program: %v", err)
	}
	work()
	l.Close()
	st, err := p.Stats()
	if err != nil {
		b.Fatalf("reading the empty program's statistics: %v", err)
	}
	return st.RunCount, st.Runtime
}

// timedRuns runs work under the timed build of the programs, then under an
// empty program timed the same way, and returns both distributions of run
// times.
func timedRuns(b *testing.B, work func()) (state, empty bench.RunTimes) {
	b.Helper()
	p, err := bench.LoadTimed()
	if err != nil {
		b.Fatalf("loading the timed build: %v", err)
	}
	work()
	state, err = p.RunTimes()
	p.Close()
	if err != nil {
		b.Fatal(err)
	}
	if empty, err = bench.TimeEmptyRuns(work); err != nil {
		b.Fatal(err)
	}
	return state, empty
}
