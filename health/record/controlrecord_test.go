package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/health/wire"
)

// controlSeries is recordSeries on node name: 11 baseline samples, the
// soak's first, now.
func controlSeries(name string, pods int, seed int64) []RecordedSample {
	series := recordSeries(pods, 13, seed)
	for i := range series {
		series[i].Snapshot.Node = name
	}
	return series
}

// controlRecordOf is what judgegate's Keep records of these control series
// at the soak's start (their first 12 samples).
func controlRecordOf(series map[string][]RecordedSample) Controls {
	c := Controls{}
	for _, name := range sortedNames(series) {
		s := series[name]
		r := Baseline{Node: name, BaselineStart: s[0].Sent.Add(-time.Second), SwapStart: s[10].Received.Add(time.Second), Baseline: s[:11]}
		r.SoakStart, r.SoakAt = &s[11], s[11].Sent
		c.SwapStart = r.SwapStart
		c.Nodes = append(c.Nodes, r)
	}
	return c
}

func sortedNames(m map[string][]RecordedSample) []string {
	var out []string
	for n := range m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// controlOf is the judge's Control from control nodes' baseline samples,
// soak start and current snapshot (as Judge.controlWindows makes it).
func controlOf(t *testing.T, nodes []string, baseline map[string][]wire.Snapshot, soakStart, cur map[string]wire.Snapshot) *health.Control {
	t.Helper()
	c := &health.Control{Scope: "zone a"}
	for _, n := range nodes {
		b := baseline[n]
		bw, err := health.NewWindow(b[0], b[len(b)-1])
		if err != nil {
			t.Fatal(err)
		}
		sw, err := health.NewWindow(soakStart[n], cur[n])
		if err != nil {
			t.Fatal(err)
		}
		c.Nodes = append(c.Nodes, health.ControlWindow{Node: n, Baseline: bw, Soak: sw})
	}
	return c
}

// TestControlRecordJudgesAsTheOriginal: a node judged against control
// nodes restored from their decoded record (every pod kept) gets exactly
// the assessment the controls' own samples give: the same rows, control
// ratios, control pods and the control group named, and the outcome the
// control group changes.
func TestControlRecordJudgesAsTheOriginal(t *testing.T) {
	// The whole zone's resets rise ×4 in the soak, the judged node's with
	// them: before/after alone fails the node, the control explains it.
	rise := func(s []RecordedSample) {
		last := &s[12].Snapshot
		for k := range last.Pods {
			p := &last.Pods[k]
			p.ResetsReceived += 3 * (p.ResetsReceived - s[11].Snapshot.Pods[k].ResetsReceived)
		}
	}
	judged := recordSeries(30, 13, 7)
	rise(judged)
	series := map[string][]RecordedSample{}
	names := []string{"c1", "c2", "c3"}
	for i, n := range names {
		series[n] = controlSeries(n, 30, int64(20+i))
		rise(series[n])
	}
	enc, keptNodes, keptPods, err := EncodeControls(controlRecordOf(series), Limits{Keep: isProbeKey})
	if err != nil || keptNodes != 3 || keptPods != 90 {
		t.Fatalf("kept %d nodes, %d pods of 90: %v", keptNodes, keptPods, err)
	}
	t.Logf("3 control nodes of 30 pods: %d bytes", len(enc))
	out, err := DecodeControls(enc)
	if err != nil {
		t.Fatal(err)
	}
	if out.Named != 3 || out.Pods != 90 || out.KeptPods() != 90 || len(out.Nodes) != 3 {
		t.Fatalf("decoded %d nodes named, %d pods, %d kept, %d records", out.Named, out.Pods, out.KeptPods(), len(out.Nodes))
	}
	origB, origS, cur := map[string][]wire.Snapshot{}, map[string]wire.Snapshot{}, map[string]wire.Snapshot{}
	recB, recS := map[string][]wire.Snapshot{}, map[string]wire.Snapshot{}
	for _, n := range names {
		s := series[n]
		origB[n], origS[n], cur[n] = placedSnapshots(s[:11]), placedSnapshots(s[11:12])[0], placedSnapshots(s[12:])[0]
		r, ok := out.Node(n)
		if !ok || r.SoakStart == nil || len(r.Baseline) != 2 {
			t.Fatalf("control %s: record %v, %+v", n, ok, r)
		}
		recB[n], recS[n] = placedSnapshots(r.Baseline), placedSnapshots([]RecordedSample{*r.SoakStart})[0]
	}
	judge := func(c *health.Control) health.Assessment {
		cfg, err := health.NewConfig(health.Config{})
		if err != nil {
			t.Fatal(err)
		}
		b := placedSnapshots(judged[:11])
		base, _ := health.NewWindow(b[0], b[10])
		soak, _ := health.NewWindow(placedSnapshots(judged[11:12])[0], placedSnapshots(judged[12:])[0])
		disp, err := health.EstimateDispersion(b, cfg.CountDispersion)
		if err != nil {
			t.Fatal(err)
		}
		return health.Assess(cfg, base, soak, disp, nil, c)
	}
	want := judge(controlOf(t, names, origB, origS, cur))
	got := judge(controlOf(t, names, recB, recS, cur))
	used := 0
	for _, r := range want.Rows {
		if r.ControlPods > 0 {
			used++
		}
	}
	if want.Control != "3 control nodes in zone a" || used == 0 || want.ExplainedByControl == 0 {
		t.Fatalf("the original: control %q, %d rows with a control, %d explained by it: the check cannot tell", want.Control, used, want.ExplainedByControl)
	}
	if without := judge(nil); without.Outcome != health.Fail || want.Outcome == health.Fail {
		t.Fatalf("before/after alone %s, with the control %s: the control group must change the outcome", without.Outcome, want.Outcome)
	}
	if !reflect.DeepEqual(got, want) {
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want)
		t.Errorf("judged against the restored controls:\n%s\nagainst their samples:\n%s", gj, wj)
	}
}

// TestControlRecordBounded: a control group far larger than the cap (60
// nodes of 110 pods) encodes within it, the probe's pods first and then the
// most connected across the group; a realistic zone (4 nodes of 110 pods)
// is logged with its size.
func TestControlRecordBounded(t *testing.T) {
	big := map[string][]RecordedSample{}
	for i := range 60 {
		big[fmt.Sprintf("c%02d", i)] = controlSeries(fmt.Sprintf("c%02d", i), 110, int64(100+i))
	}
	in := controlRecordOf(big)
	enc, keptNodes, keptPods, err := EncodeControls(in, Limits{Keep: isProbeKey})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("60 control nodes × 110 pods: %d nodes, %d of 6600 pods kept in %d bytes (cap %d)", keptNodes, keptPods, len(enc), DefaultControlsBytes)
	if len(enc) > DefaultControlsBytes {
		t.Fatalf("%d bytes, over the %d cap", len(enc), DefaultControlsBytes)
	}
	if keptPods == 0 || keptPods >= 6600 {
		t.Fatalf("kept %d pods of 6600: want some dropped to fit", keptPods)
	}
	out, err := DecodeControls(enc)
	if err != nil {
		t.Fatal(err)
	}
	if out.Named != 60 || out.Pods != 6600 || out.KeptPods() != keptPods || len(out.Nodes) != keptNodes {
		t.Fatalf("decoded %d named, %d pods, %d kept in %d nodes; encoded %d in %d", out.Named, out.Pods, out.KeptPods(), len(out.Nodes), keptPods, keptNodes)
	}
	// The probe's pods go first: every kept node keeps both of its sides
	// when the group keeps fewer pods than twice its nodes' probes.
	probes := 0
	for _, r := range out.Nodes {
		for _, p := range r.Baseline[0].Snapshot.Pods {
			if p.Namespace == health.DefaultProbeNamespace {
				probes++
			}
		}
	}
	if want := min(keptPods, 120); probes != want {
		t.Errorf("%d probe pods kept of %d, want %d (the probe's first)", probes, keptPods, want)
	}

	zone := map[string][]RecordedSample{}
	for i := range 4 {
		zone[fmt.Sprintf("z%d", i)] = controlSeries(fmt.Sprintf("z%d", i), 110, int64(200+i))
	}
	enc, keptNodes, keptPods, err = EncodeControls(controlRecordOf(zone), Limits{Keep: isProbeKey})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("4 control nodes × 110 pods: %d nodes, %d of 440 pods kept in %d bytes", keptNodes, keptPods, len(enc))
	one := map[string][]RecordedSample{"z0": zone["z0"]}
	enc, _, keptPods, err = EncodeControls(controlRecordOf(one), Limits{Keep: isProbeKey})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("1 control node × 110 pods: %d of 110 pods kept in %d bytes", keptPods, len(enc))
}

// TestControlRecordCorrupt: what DecodeControls cannot trust is
// ErrCorrupt, and a group with no recordable node is an error.
func TestControlRecordCorrupt(t *testing.T) {
	enc, _, _, err := EncodeControls(controlRecordOf(map[string][]RecordedSample{"c1": controlSeries("c1", 6, 4)}), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	node, _, err := EncodeBaseline(recordOf(recordSeries(6, 4, 4)), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	flipped := []byte(enc)
	flipped[len(flipped)/2] ^= 0x01
	for name, s := range map[string]string{
		"empty":               "",
		"not base64":          "%%%",
		"truncated":           enc[:len(enc)/2],
		"flipped":             string(flipped),
		"a node's own record": node,
	} {
		if _, err := DecodeControls(s); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
	one := controlRecordOf(map[string][]RecordedSample{"c1": controlSeries("c1", 6, 4)})
	one.Nodes[0].Baseline = one.Nodes[0].Baseline[:1]
	if _, _, _, err := EncodeControls(one, Limits{}); err == nil || !strings.Contains(err.Error(), "two baseline samples") {
		t.Errorf("a control with one baseline sample: %v, want an error", err)
	}
}

// BenchmarkEncodeControls: what EncodeControls costs at a soak's start for
// a control group far over the cap (500 control nodes of 40 pods, the
// three samples it reads of each): the record's bytes, nodes and pods kept
// are printed with the time.
func BenchmarkEncodeControls(b *testing.B) {
	c := Controls{}
	for i := range 500 {
		s := recordSeries(40, 3, int64(300+i))
		name := fmt.Sprintf("c%03d", i)
		for k := range s {
			s[k].Snapshot.Node = name
		}
		r := Baseline{Node: name, BaselineStart: s[0].Sent.Add(-time.Second), SwapStart: s[1].Received.Add(time.Second), Baseline: s[:2]}
		r.SoakStart, r.SoakAt = &s[2], s[2].Sent
		c.SwapStart = r.SwapStart
		c.Nodes = append(c.Nodes, r)
	}
	b.ResetTimer()
	var enc string
	var nodes, pods int
	for range b.N {
		var err error
		if enc, nodes, pods, err = EncodeControls(c, Limits{Keep: isProbeKey}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(enc)), "bytes")
	b.ReportMetric(float64(nodes), "nodes_kept")
	b.ReportMetric(float64(pods), "pods_kept")
}
