package health

import (
	"context"
	"testing"

	"github.com/nodewise/nodewise/health/wire"
)

func withoutProbe(s wire.Snapshot) wire.Snapshot {
	var pods []wire.PodCounters
	for _, p := range s.Pods {
		if p.Namespace != DefaultProbeNamespace {
			pods = append(pods, p)
		}
	}
	s.Pods = pods
	return s
}

// A node without probe evidence is held (Inconclusive), not passed; with
// the probe optional it is judged on its workload.
func TestJudgeRequiresProbeEvidence(t *testing.T) {
	j, in, cur := judgeScenario(t, 1, nil)
	for i := range in.Baseline {
		in.Baseline[i] = withoutProbe(in.Baseline[i])
	}
	in.SoakStart = withoutProbe(in.SoakStart)
	cur = withoutProbe(cur)
	j.src = SnapshotFunc(func(context.Context, string) (wire.Snapshot, error) { return cur, nil })
	v := mustJudge(t, j, in)
	if v.Outcome != Inconclusive || !hasReason(v, "no probe evidence") {
		t.Fatalf("no probe: %s %q", v.Outcome, v.Reasons)
	}
	in.Gates.ProbeOptional = true
	if v := mustJudge(t, j, in); v.Outcome != Pass {
		t.Fatalf("probe optional: %s %q", v.Outcome, v.Reasons)
	}
}

// A drained node keeps only its probe: it is judged on it, and the reasons
// carry the probe's before → after line and say there was no control.
func TestJudgeDrainedNodeOnProbe(t *testing.T) {
	j, in, cur := judgeScenario(t, 1, nil)
	onlyProbeNow := onlyProbe(cur)
	in.SoakStart = onlyProbe(in.SoakStart)
	j.src = SnapshotFunc(func(context.Context, string) (wire.Snapshot, error) { return onlyProbeNow, nil })
	v := mustJudge(t, j, in)
	if v.Outcome != Pass || !hasReason(v, "probe: 1 pods") || !hasReason(v, "judged before/after alone") {
		t.Fatalf("drained node: %s %q", v.Outcome, v.Reasons)
	}
	// The probe's resets ×10 in the soak: the node fails on probe evidence.
	for i := range onlyProbeNow.Pods {
		onlyProbeNow.Pods[i].ResetsReceived += 2000
	}
	in.Gates.ConsecutiveFailures = 1
	if v := mustJudge(t, j, in); v.Outcome != Fail || !hasReason(v, "probe nodewise-probe/") {
		t.Fatalf("probe regression on a drained node: %s %q", v.Outcome, v.Reasons)
	}
}

func TestWorkloadOf(t *testing.T) {
	for name, want := range map[string]string{
		"web-5f6c7d9b8-x2k4p":  "web",
		"nodewise-probe-x2k4p": "nodewise-probe",
		"db-0":                 "db",
		"redis-cache":          "redis-cache", // vowels: not a generated suffix
		"standalone":           "standalone",
	} {
		if got := workloadOf(name); got != want {
			t.Errorf("workloadOf(%q) = %q, want %q", name, got, want)
		}
	}
}
