package health

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nodewise/nodewise/health/wire"
)

// The cluster simulation: the judged node and its control nodes share
// workloads, and the whole cluster can change during the soak (every client
// ×3, a dependency failing). Each trial judges the node twice on the same
// draw: with its control group, and before/after alone. See docs/health.md.

const (
	clusterWorkloads = 40 // each node hosts 30 of them, one pod each
	clusterControl   = 3  // control nodes in the judged node's zone
	// clusterProbes is the number of probes in the cluster: a broken node's
	// probe shares its failures with 1/(clusterProbes−1) of every other
	// probe's traffic (they talk to it too), control nodes' included.
	clusterProbes = 10
	clusterSwap   = 30 // seconds between the last baseline snapshot and the soak's first
)

// simClusterTrials is the nodes per case (set lower to profile).
var simClusterTrials = 1000

// clusterTiming is the judgement's windows: baseline and soak, and how often
// the recorder samples the baseline (for the dispersion estimate).
type clusterTiming struct {
	baseline, soak, sample int // seconds
	// interval is gates.interval: after a failing judgement the next one,
	// this much later, must fail too (consecutiveFailures 2).
	interval int
}

func (t clusterTiming) String() string {
	return fmt.Sprintf("baseline %s, soak %s", time.Duration(t.baseline)*time.Second, time.Duration(t.soak)*time.Second)
}

// defaultTiming is the defaults: orchestrator/policy.go's baseline and soak,
// and record.RecorderConfig's sampling period.
var defaultTiming = clusterTiming{baseline: 300, soak: 300, sample: 30, interval: 60}

// clusterShift changes every node's traffic during the soak, the judged
// node's and the control nodes' alike.
type clusterShift struct {
	name  string
	apply func(j jitterer, workload int, p simPod) simPod
}

// jitterer spreads a cluster-wide change: each workload responds in its own
// way (×lognormal σ 0.1 per effect, the same on every node), and each of its
// pods a little more (σ 0.03).
type jitterer struct {
	r        *rand.Rand
	workload [][]float64 // [workload][effect]
}

func newJitterer(r *rand.Rand) jitterer {
	j := jitterer{r: r, workload: make([][]float64, clusterWorkloads+1)} // the probe last
	for w := range j.workload {
		for range 8 {
			j.workload[w] = append(j.workload[w], math.Exp(0.1*r.NormFloat64()))
		}
	}
	return j
}

// of is factor f of effect e for one pod of workload w (-1: the probe).
func (j jitterer) of(w, e int, f float64) float64 {
	if w < 0 {
		w = clusterWorkloads
	}
	return f * j.workload[w][e] * math.Exp(0.03*j.r.NormFloat64())
}

var (
	shiftNone = clusterShift{name: "none"}
	// Every client ×3: three times the connections, and the load shows in
	// resets, failed connects and retransmits per connection (×1.5) and in
	// latency (×1.3). The probe's rate is its own, but it shares the load.
	shiftLoad3x = clusterShift{name: "every client ×3", apply: func(j jitterer, w int, p simPod) simPod {
		if !p.probe {
			p.connRate *= j.of(w, 0, 3)
		}
		p.resetRecvP *= j.of(w, 1, 1.5)
		p.resetSentP *= j.of(w, 2, 1.5)
		p.failP *= j.of(w, 3, 1.5)
		p.retransPer *= j.of(w, 4, 1.5)
		p.latMedianUS *= j.of(w, 5, 1.3)
		p.rttMedianUS *= j.of(w, 6, 1.3)
		return p
	}}
	// A dependency failing: the pods of every third workload receive 5× the
	// resets and fail 10× the connects, on every node.
	shiftDependency = clusterShift{name: "a dependency failing", apply: func(j jitterer, w int, p simPod) simPod {
		if !p.probe && w%3 == 0 {
			p.resetRecvP *= j.of(w, 1, 5)
			p.failP *= j.of(w, 3, 10)
		}
		return p
	}}
)

// clusterCase is one row of the table.
type clusterCase struct {
	shift   clusterShift
	drained bool   // the judged node was drained: only the probe is compared
	regress string // "", "pod" (3× resets received in one pod of 30), "probe" (3× in the probe) or "rst" (a quarter of every pod's connections reset)
}

func (c clusterCase) String() string {
	s := "healthy"
	switch c.regress {
	case "pod":
		s = "3× resets in 1 pod of 30"
	case "probe":
		s = "3× resets in the probe"
	case "rst":
		s = "the -rst build (¼ of connections reset)"
	}
	if c.drained {
		s += ", drained"
	} else {
		s += ", undrained"
	}
	if c.shift.name != "none" {
		s += ", " + c.shift.name
	}
	return s
}

// clusterNode is one node's pods: workload indexes and traffic models (the probe last).
type clusterNode struct {
	workload []int
	pods     []simPod
}

// simProbeResetP is the probe's resets received per connection in the
// cluster simulation: 0.2 resets/s at simProbeRate, the bar the workload
// pods' reset case uses (resetsEligible).
const simProbeResetP = 0.2 / simProbeRate

func newClusterNode(r *rand.Rand, workloads []simPod, probe simPod) clusterNode {
	var n clusterNode
	for _, w := range r.Perm(len(workloads))[:simPods] {
		p := workloads[w]
		p.connRate = math.Min(300, math.Max(0.2, p.connRate*math.Exp(0.3*r.NormFloat64())))
		n.workload = append(n.workload, w)
		n.pods = append(n.pods, p)
	}
	n.workload = append(n.workload, -1)
	n.pods = append(n.pods, probe)
	return n
}

// clusterSnapshots draws one node's baseline series, the snapshot at the
// soak's start and the soak's snapshots every step seconds (the last at
// its end; one step of t.soak draws the whole soak at once).
func clusterSnapshots(r *rand.Rand, node int, t clusterTiming, n clusterNode, soakPods []simPod, step int) ([]wire.Snapshot, wire.Snapshot, []wire.Snapshot) {
	name := fmt.Sprintf("node-%d", node)
	start := simStart
	cum := make([]wire.PodCounters, len(n.pods))
	for i := range cum {
		w := n.workload[i]
		cum[i] = simCounters(fmt.Sprintf("ns%d", w%5), fmt.Sprintf("wl%02d-7d9c5b8f4-x2k%c%c", w, safeAlphabet[node%27], safeAlphabet[i%27]),
			fmt.Sprintf("uid-%d-%d", node, i))
		if n.pods[i].probe {
			cum[i].Namespace, cum[i].Name = DefaultProbeNamespace, fmt.Sprintf("nodewise-probe-x2k%c%c", safeAlphabet[node%27], 'z')
		}
	}
	at := start.Add(time.Minute)
	series := []wire.Snapshot{snapshotOf(name, start, at, cum)}
	for s := 0; s < t.baseline; s += t.sample {
		d := min(t.sample, t.baseline-s)
		addWindow(r, n.pods, cum, d, nil)
		at = at.Add(time.Duration(d) * time.Second)
		series = append(series, snapshotOf(name, start, at, cum))
	}
	addWindow(r, n.pods, cum, clusterSwap, nil)
	at = at.Add(clusterSwap * time.Second)
	s2 := snapshotOf(name, start, at, cum)
	var soak []wire.Snapshot
	for s := 0; s < t.soak; s += step {
		d := min(step, t.soak-s)
		addWindow(r, soakPods, cum, d, nil)
		at = at.Add(time.Duration(d) * time.Second)
		soak = append(soak, snapshotOf(name, start, at, cum))
	}
	return series, s2, soak
}

// onlyProbe keeps the probe's pods: on a drained node the workload's pods
// were evicted before the swap, and the ones scheduled after it are new.
func onlyProbe(s wire.Snapshot) wire.Snapshot {
	var pods []wire.PodCounters
	for _, p := range s.Pods {
		if p.Namespace == DefaultProbeNamespace {
			pods = append(pods, p)
		}
	}
	s.Pods = pods
	return s
}

// clusterDraw is one drawn cluster: the judged node's baseline series and
// every node's soak (the judged node first), drawn every step seconds.
type clusterDraw struct {
	c      clusterCase
	series []wire.Snapshot
	disp   Dispersion
	nodes  []soaking
	target string // the injected pod's workload, or the probe's namespace
}

// soaking is one node's soak: its pods in the soak, its baseline window and
// its snapshots at the soak's start and every step.
type soaking struct {
	pods  []simPod
	start wire.Snapshot
	soak  []wire.Snapshot
	base  Window
}

// drawCluster draws a cluster for case c, every node's soak in steps of
// step seconds.
func drawCluster(r *rand.Rand, cfg Config, t clusterTiming, c clusterCase, step int) clusterDraw {
	workloads := make([]simPod, clusterWorkloads)
	for i := range workloads {
		workloads[i] = simWorkload(r)
	}
	probe := simProbePod(r)
	probe.resetRecvP = simProbeResetP
	nodes := make([]clusterNode, 1+clusterControl)
	for i := range nodes {
		nodes[i] = newClusterNode(r, workloads, probe)
	}
	jit := newJitterer(r)
	d := clusterDraw{c: c}
	for i, n := range nodes {
		soak := append([]simPod(nil), n.pods...)
		if c.shift.apply != nil {
			for j := range soak {
				soak[j] = c.shift.apply(jit, n.workload[j], soak[j])
			}
		}
		probeIdx := len(soak) - 1
		switch {
		case c.regress == "probe" && i == 0:
			soak[probeIdx].resetRecvP *= 3
		case c.regress == "probe":
			soak[probeIdx].resetRecvP *= 1 + 2.0/(clusterProbes-1)
		case c.regress == "rst" && i == 0:
			for j := range soak {
				soak[j].resetRecvP = 0.25 // the faulty -rst build: a quarter of connections reset
			}
		case c.regress == "pod" && i == 0:
			j := eligible(r, n.pods, resetsEligible)
			soak[j].resetRecvP *= 3
			d.target = fmt.Sprintf("wl%02d", n.workload[j])
		}
		series, s2, steps := clusterSnapshots(r, i, t, n, soak, step)
		base, err := NewWindow(series[0], series[len(series)-1])
		if err != nil {
			panic(err)
		}
		d.nodes = append(d.nodes, soaking{soak, s2, steps, base})
		if i == 0 {
			d.series = series
		}
	}
	if c.regress == "probe" {
		d.target = "nodewise-probe"
	}
	var err error
	if d.disp, err = EstimateDispersion(d.series, cfg.CountDispersion); err != nil {
		panic(err)
	}
	return d
}

// assess judges the judged node's soak from its start to end (its own
// snapshot, and the control nodes' at the same step), with its control
// group or, when alone, before/after alone.
func (d clusterDraw) assess(cfg Config, end func(n soaking) wire.Snapshot, alone bool) Assessment {
	var windows []ControlWindow
	for _, n := range d.nodes[1:] {
		sw, err := NewWindow(n.start, end(n))
		if err != nil {
			panic(err)
		}
		windows = append(windows, ControlWindow{Node: n.start.Node, Baseline: n.base, Soak: sw})
	}
	start, stop := d.nodes[0].start, end(d.nodes[0])
	if d.c.drained {
		start, stop = onlyProbe(start), onlyProbe(stop)
	}
	soak, err := NewWindow(start, stop)
	if err != nil {
		panic(err)
	}
	var ctrl *Control
	if !alone {
		ctrl = &Control{Scope: "zone a", Nodes: windows}
	}
	return Assess(cfg, d.nodes[0].base, soak, d.disp, nil, ctrl)
}

// step is the soak's end at step i of every node's soak.
func step(i int) func(n soaking) wire.Snapshot {
	return func(n soaking) wire.Snapshot { return n.soak[i] }
}

// later draws gates.interval more of every node's soak from r2 (fresh
// traffic, the same pods and changes): the soak's end of the next
// judgement, which must fail too under consecutiveFailures 2.
func (d clusterDraw) later(r2 *rand.Rand, t clusterTiming) func(n soaking) wire.Snapshot {
	later := map[string]wire.Snapshot{}
	for _, n := range d.nodes {
		later[n.start.Node] = simMore(r2, n.pods, nil, n.soak[len(n.soak)-1], t.interval)
	}
	return func(n soaking) wire.Snapshot { return later[n.start.Node] }
}

// clusterTrial draws a cluster and judges its first node with and without
// its control group. When the judgement with the control fails and r2 is
// not nil, again judges the next interval's longer soak.
func clusterTrial(r, r2 *rand.Rand, cfg Config, t clusterTiming, c clusterCase) (withControl, alone Assessment, target string, again *Assessment) {
	d := drawCluster(r, cfg, t, c, t.soak)
	last := step(0) // the one step: the whole soak
	withControl, alone = d.assess(cfg, last, false), d.assess(cfg, last, true)
	if withControl.Outcome != Fail || r2 == nil {
		return withControl, alone, d.target, nil
	}
	next := d.assess(cfg, d.later(r2, t), false)
	return withControl, alone, d.target, &next
}

// clusterRates are one case's figures, with the control group and without.
type clusterRates struct {
	trials              int
	fails, failsAlone   int
	caught, caughtAlone int
	// failsRule and caughtRule are with the control group, after the
	// consecutive-failures rule (2): the node fails only when the next
	// judgement, one gates.interval later, fails too.
	failsRule, caughtRule       int
	inconclusive, explained     int
	examples, explainedExamples []string
}

func (s clusterRates) pct(n int) float64 { return 100 * float64(n) / float64(s.trials) }

// caughtIn: the node failed and the injected pod (by workload) or the probe is among its regressions.
func caughtIn(a Assessment, target string) bool {
	if a.Outcome != Fail {
		return false
	}
	for _, r := range a.Rows {
		if r.Regressed && workloadOf(r.Pod.Name) == target || r.Regressed && target == "nodewise-probe" && r.Probe {
			return true
		}
	}
	return false
}

func runCluster(seed uint64, trials int, t clusterTiming, c clusterCase) clusterRates {
	cfg, err := NewConfig(Config{})
	if err != nil {
		panic(err)
	}
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	r2 := rand.New(rand.NewPCG(seed^0x5bd1e995, seed))
	var out clusterRates
	for range trials {
		with, alone, target, again := clusterTrial(r, r2, cfg, t, c)
		out.trials++
		if again != nil && again.Outcome == Fail {
			out.failsRule++
			if target != "" && caughtIn(*again, target) {
				out.caughtRule++
			}
		}
		if with.Outcome == Fail {
			out.fails++
			if len(out.examples) < 2 {
				out.examples = append(out.examples, with.Reasons[0])
			}
		}
		if alone.Outcome == Fail {
			out.failsAlone++
		}
		if with.Outcome == Inconclusive {
			out.inconclusive++
		}
		if with.ExplainedByControl > 0 {
			out.explained++
			for _, r := range with.Reasons {
				if len(out.explainedExamples) < 1 && len(r) > 9 && r[:9] == "the contr" {
					out.explainedExamples = append(out.explainedExamples, r)
				}
			}
		}
		if target != "" {
			if caughtIn(with, target) {
				out.caught++
			}
			if caughtIn(alone, target) {
				out.caughtAlone++
			}
		}
	}
	return out
}

// The acceptance table at the defaults. Targets (issue 13): healthy nodes
// that Fail, over 1,000 nodes per cluster-wide condition, ≤ 1%; a 3× reset
// rise in the probe or in one pod of 30, caught on drained and undrained
// nodes, ≥ 95%. It prints every figure, with and without the control group,
// for one interval and, with the control, after the consecutive-failures
// rule (what the orchestrator does: a node fails when the next judgement,
// gates.interval later, fails too); the targets are asserted on the latter.
// It asserts too that the control group explains most of a
// cluster-wide shift (before/after alone fails at least 3× as many nodes),
// it costs at most a quarter of the power, and the probe leaves no node
// Inconclusive.
func TestSimClusterAcceptance(t *testing.T) {
	healthy := []clusterCase{
		{shift: shiftNone}, {shift: shiftNone, drained: true},
		{shift: shiftLoad3x}, {shift: shiftLoad3x, drained: true},
		{shift: shiftDependency}, {shift: shiftDependency, drained: true},
	}
	regressions := []clusterCase{
		{shift: shiftNone, regress: "probe"}, {shift: shiftNone, regress: "probe", drained: true},
		{shift: shiftNone, regress: "pod"},
	}
	t.Logf("%s, %d control nodes, a sample every %ds", defaultTiming, clusterControl, defaultTiming.sample)
	t.Logf("%-55s %8s %14s %14s %12s %12s", "case", "trials", "Fail (control)", "Fail (alone)", "inconclusive", "Fail (rule)")
	for i, c := range healthy {
		// Half of the 1,000 nodes of each condition drained, half not.
		s := runCluster(uint64(300+i), simClusterTrials/2, defaultTiming, c)
		t.Logf("%-55s %8d %13.1f%% %13.1f%% %11.1f%% %11.1f%%", c, s.trials, s.pct(s.fails), s.pct(s.failsAlone), s.pct(s.inconclusive), s.pct(s.failsRule))
		if len(s.explainedExamples) > 0 {
			t.Logf("    e.g. %s", s.explainedExamples[0])
		}
		if len(s.examples) > 0 {
			t.Logf("    false Fail e.g. %q", s.examples)
		}
		if s.pct(s.failsRule) > 1 {
			// The acceptance target (issue 13), on what a user gets.
			t.Errorf("%s: target ≤ 1%% NOT MET: %.1f%% fail after the consecutive-failures rule", c, s.pct(s.failsRule))
		}
		if s.inconclusive > 0 {
			t.Errorf("%s: %d nodes inconclusive: the probe must give every node evidence", c, s.inconclusive)
		}
		if s.failsAlone >= 10 && s.failsAlone < 3*s.fails {
			t.Errorf("%s: before/after alone failed %d nodes, with the control %d: the control group must explain most of a cluster-wide shift", c, s.failsAlone, s.fails)
		}
	}
	t.Logf("%-55s %8s %14s %14s %14s", "case", "trials", "caught (ctrl)", "caught (alone)", "caught (rule)")
	for i, c := range regressions {
		s := runCluster(uint64(400+i), simClusterTrials/2, defaultTiming, c)
		t.Logf("%-55s %8d %13.1f%% %13.1f%% %13.1f%%", c, s.trials, s.pct(s.caught), s.pct(s.caughtAlone), s.pct(s.caughtRule))
		if s.pct(s.caughtRule) < 95 {
			t.Errorf("%s: target ≥ 95%% NOT MET: %.1f%% caught after the consecutive-failures rule", c, s.pct(s.caughtRule))
		}
		if s.pct(s.caught) < 75 {
			t.Errorf("%s: caught %.1f%%: the control group costs too much power", c, s.pct(s.caught))
		}
	}
}

func BenchmarkClusterTrial(b *testing.B) {
	cfg, _ := NewConfig(Config{})
	r := rand.New(rand.NewPCG(5, 5))
	for range b.N {
		clusterTrial(r, nil, cfg, defaultTiming, clusterCase{shift: shiftLoad3x})
	}
}

// BenchmarkSimClusterTimings prints the power and the false-Fail rate by
// baseline and soak length, the figures the defaults were chosen from
// (docs/health.md), one line a timing. It fails only if a longer soak
// catches less. A report of about two minutes of CPU, so a benchmark
// (make bench), not a test of make test.
func BenchmarkSimClusterTimings(b *testing.B) {
	for range b.N {
		trials := simClusterTrials / 5
		b.Logf("%-28s %10s %12s %12s %12s", "timing", "trials", "false Fail", "probe 3×", "pod 3×")
		var last float64
		for i, tm := range []clusterTiming{{60, 120, 15, 60}, {120, 120, 30, 60}, {300, 120, 30, 60}, {300, 180, 30, 60}, {300, 300, 30, 60}, {600, 300, 60, 60}} {
			healthy := runCluster(uint64(500+i), trials, tm, clusterCase{shift: shiftNone})
			probe := runCluster(uint64(600+i), trials, tm, clusterCase{shift: shiftNone, regress: "probe", drained: true})
			pod := runCluster(uint64(700+i), trials, tm, clusterCase{shift: shiftNone, regress: "pod"})
			b.Logf("%-28s %10d %11.1f%% %11.1f%% %11.1f%%", tm, trials, healthy.pct(healthy.fails), probe.pct(probe.caught), pod.pct(pod.caught))
			if tm.baseline == 300 && tm.soak > 120 && pod.pct(pod.caught)+10 < last {
				b.Errorf("%s: power fell from %.1f%% to %.1f%% with a longer soak", tm, last, pod.pct(pod.caught))
			}
			if tm.baseline == 300 {
				last = pod.pct(pod.caught)
			}
		}
	}
}
