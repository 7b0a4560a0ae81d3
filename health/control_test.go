package health

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/wire"
)

// Every client ×3: before/after alone fails the node; with the control
// group it passes and the reason says the control moved the same way.
func TestAssessControlExplainsClusterWideShift(t *testing.T) {
	cfg, _ := NewConfig(Config{})
	r := rand.New(rand.NewPCG(31, 31))
	for range 5 {
		with, alone, _, _ := clusterTrial(r, nil, cfg, defaultTiming, clusterCase{shift: shiftLoad3x})
		if alone.Outcome != Fail || with.Outcome == Fail {
			continue
		}
		found := false
		for _, s := range with.Reasons {
			found = found || strings.Contains(s, "moved the same way") && strings.Contains(s, "3 control nodes in zone a")
		}
		if with.ExplainedByControl == 0 || !found || with.Control != "3 control nodes in zone a" {
			t.Fatalf("explained %d, control %q, reasons %q", with.ExplainedByControl, with.Control, with.Reasons)
		}
		return
	}
	t.Fatal("no trial where the control group turned a before/after Fail into a Pass")
}

// A control node whose agent does not answer is left out with a reason, and
// with none left the node is judged before/after alone.
func TestJudgeLeavesOutUnreachableControl(t *testing.T) {
	j, in, cur := judgeScenario(t, 1, nil)
	j.src = SnapshotFunc(func(_ context.Context, node string) (wire.Snapshot, error) {
		if node == "node-b" {
			return wire.Snapshot{}, errors.New("connection refused")
		}
		return cur, nil
	})
	in.Control = []ControlNode{{Node: "node-b", Baseline: in.Baseline, SoakStart: in.SoakStart}}
	in.ControlScope = "zone a"
	v := mustJudge(t, j, in)
	if v.Outcome != Pass || !hasReason(v, "control node node-b left out: agent did not answer") || !hasReason(v, "judged before/after alone") {
		t.Fatalf("%s %q", v.Outcome, v.Reasons)
	}
}

// ctrlPod is one pod's window in the control tests: connections and resets
// received over 300 s.
func ctrlPod(ns, name string, conns, resets uint64) PodWindow {
	return PodWindow{PodKey: PodKey{Namespace: ns, Name: name, Side: wire.SideApp}, UID: name, Duration: 300 * time.Second,
		Counts: Counts{Connects: conns, ResetsReceived: resets}, ConnectLatency: newHist(), SRTT: newHist()}
}

func ctrlWindow(pods ...PodWindow) Window {
	return Window{Duration: 300 * time.Second, Pods: pods}
}

func rowOf(a Assessment, name string, m Metric) Comparison {
	for _, r := range a.Rows {
		if r.Pod.Name == name && r.Metric == m {
			return r
		}
	}
	return Comparison{}
}

// A dependency failing hits one workload of two (×5 resets on every node).
// The judged node's pod of the affected workload has no pod of its own on
// the control nodes: it is compared with the control workload that rose the
// most (×5), not with the pool of both (×3), so its ×5 is not the node's.
// A ×5 of the unaffected workload's pod, whose own control stayed put, is.
func TestAssessUnseenWorkloadAgainstTheMostMovedControl(t *testing.T) {
	cfg, _ := NewConfig(Config{ProbeOptional: true})
	const hit, calm, unseen = "hit-7d9c5b8f4-x2kbb", "calm-7d9c5b8f4-x2kbc", "dep-7d9c5b8f4-x2kbd"
	var nodes []ControlWindow
	for i := range 3 {
		nodes = append(nodes, ControlWindow{Node: fmt.Sprintf("node-%d", i),
			Baseline: ctrlWindow(ctrlPod("a", hit, 6000, 300), ctrlPod("a", calm, 6000, 300)),
			Soak:     ctrlWindow(ctrlPod("a", hit, 6000, 1500), ctrlPod("a", calm, 6000, 300))})
	}
	base := ctrlWindow(ctrlPod("a", unseen, 6000, 300), ctrlPod("a", calm, 6000, 300))
	soak := ctrlWindow(ctrlPod("a", unseen, 6000, 1500), ctrlPod("a", calm, 6000, 1500))
	a := Assess(cfg, base, soak, Dispersion{}, nil, &Control{Scope: "zone a", Nodes: nodes})
	r := rowOf(a, unseen, v1alpha1.MetricResetsReceived)
	if r.Regressed || !r.ExplainedByControl || r.ControlRatio < 4.5 {
		t.Errorf("unseen workload's pod: regressed %v, explained %v, control ×%.2f (want ×5, explained): %q", r.Regressed, r.ExplainedByControl, r.ControlRatio, a.Reasons)
	}
	if c := rowOf(a, calm, v1alpha1.MetricResetsReceived); !c.Regressed {
		t.Errorf("the unaffected workload's ×5 was not flagged: %q", a.Reasons)
	}
}

// The control nodes' probes share a little of a broken node's probe
// regression (they talk to it): their rise alone (×1.3 on 300 resets, p
// about 3e-4) does not count as the cluster's change, and the judged probe's
// ×3 is tested before/after. A ×3 of the control probes does count.
func TestAssessProbeControlSharingTheRegression(t *testing.T) {
	cfg, _ := NewConfig(Config{})
	judge := func(after uint64) Comparison {
		var nodes []ControlWindow
		for _, n := range "bcd" {
			name := "nodewise-probe-x2k" + string(n) + "z"
			nodes = append(nodes, ControlWindow{Node: "node-" + string(n),
				Baseline: ctrlWindow(ctrlPod(DefaultProbeNamespace, name, 12000, 100), ctrlPod("a", "calm-7d9c5b8f4-x2kbc", 6000, 300)),
				Soak:     ctrlWindow(ctrlPod(DefaultProbeNamespace, name, 12000, after), ctrlPod("a", "calm-7d9c5b8f4-x2kbc", 6000, 300))})
		}
		judged := "nodewise-probe-x2kgz"
		base := ctrlWindow(ctrlPod(DefaultProbeNamespace, judged, 12000, 60))
		soak := ctrlWindow(ctrlPod(DefaultProbeNamespace, judged, 12000, 180))
		a := Assess(cfg, base, soak, Dispersion{}, nil, &Control{Scope: "zone a", Nodes: nodes})
		return rowOf(a, judged, v1alpha1.MetricResetsReceived)
	}
	if r := judge(130); !r.Regressed || r.ctrlUsed || r.ControlRatio < 1.2 {
		t.Errorf("probe ×3 against control probes ×1.3: regressed %v, control used %v ×%.2f", r.Regressed, r.ctrlUsed, r.ControlRatio)
	}
	if r := judge(300); r.Regressed || !r.ctrlUsed || !r.ExplainedByControl {
		t.Errorf("probe ×3 against control probes ×3: regressed %v, control used %v, explained %v", r.Regressed, r.ctrlUsed, r.ExplainedByControl)
	}
}

// Every client ×3 slows SRTT ×1.3 on every pod. A workload whose only
// control pod reads no slowdown (one pod's median is loose) is not blamed
// for less than its side's pods slowed by.
func TestAssessLatencyControlNotBelowItsSide(t *testing.T) {
	cfg, _ := NewConfig(Config{ProbeOptional: true})
	r := rand.New(rand.NewPCG(3, 3))
	pod := func(name string, median float64) PodWindow {
		p := ctrlPod("a", name, 6000, 0)
		lognormalHist(r, p.SRTT.Buckets, 6000, median, 0.4)
		return p
	}
	const own = "own-7d9c5b8f4-x2kbb"
	var nodes []ControlWindow
	for i := range 3 {
		other := fmt.Sprintf("other%d-7d9c5b8f4-x2kbc", i)
		b, s := []PodWindow{pod(other, 400)}, []PodWindow{pod(other, 520)}
		if i == 0 {
			b, s = append(b, pod(own, 700)), append(s, pod(own, 700))
		}
		nodes = append(nodes, ControlWindow{Node: fmt.Sprintf("node-%d", i), Baseline: ctrlWindow(b...), Soak: ctrlWindow(s...)})
	}
	base, soak := ctrlWindow(pod(own, 700)), ctrlWindow(pod(own, 910))
	a := Assess(cfg, base, soak, Dispersion{}, nil, &Control{Scope: "zone a", Nodes: nodes})
	if alone := Assess(cfg, base, soak, Dispersion{}, nil, nil); !rowOf(alone, own, v1alpha1.MetricSRTT).Regressed {
		t.Fatalf("the ×1.3 did not fail before/after alone: %q", alone.Reasons)
	}
	if row := rowOf(a, own, v1alpha1.MetricSRTT); row.Regressed || row.ControlRatio < 1.2 {
		t.Errorf("srtt ×1.3 with the side ×1.3: regressed %v, control ×%.2f: %q", row.Regressed, row.ControlRatio, a.Reasons)
	}
}
