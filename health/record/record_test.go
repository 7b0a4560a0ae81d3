package record

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/health/wire"
)

// recordSeries is a node's baseline: samples every 30 s of pods pods (app
// and proxy sides of pods/2 pods) whose counters grow at seeded random
// rates, histograms with a handful of busy buckets, and connection ages
// that come and go. The probe's pods are the last two.
func recordSeries(pods, samples int, seed int64) []RecordedSample {
	rng := rand.New(rand.NewSource(seed))
	base := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	start := base.Add(-time.Hour)
	cur := make([]wire.PodCounters, pods)
	rate := make([]float64, pods)
	for i := range cur {
		side := wire.SideApp
		if i%2 == 1 {
			side = wire.SideProxy
		}
		ns, name := fmt.Sprintf("ns-%d", i/20), fmt.Sprintf("workload-%d-7d9f8c6b5-%05d", i/2, i/2)
		if i >= pods-2 {
			ns, name = health.DefaultProbeNamespace, "nodewise-probe-x"
		}
		cur[i] = wire.PodCounters{Namespace: ns, Name: name, UID: fmt.Sprintf("uid-%08x", rng.Uint32()), Side: side,
			ConnectLatency: wire.Log2Histogram{Buckets: make([]uint64, wire.Log2Buckets)}, SRTT: wire.Log2Histogram{Buckets: make([]uint64, wire.Log2Buckets)},
			ConnAges: make([]uint64, len(wire.AgeBucketBoundsSeconds)+1)}
		rate[i] = rng.ExpFloat64() * 20 // connections per second: a few busy pods, many quiet
	}
	grow := func(r float64) uint64 { return uint64(rng.Float64() * 2 * r) }
	var out []RecordedSample
	for s := range samples {
		at := base.Add(time.Duration(s) * 30 * time.Second)
		snap := wire.Snapshot{Node: "node-a", Time: at.Add(3 * time.Millisecond), StartTime: start, Seq: uint64(100 + s), Mode: wire.ModeEBPF, AgentVersion: "v1.2.3"}
		for i := range cur {
			c := &cur[i]
			n := grow(rate[i] * 30)
			c.Connects += n
			c.Accepts += grow(rate[i] * 30)
			c.ResetsReceived += grow(rate[i] * 0.3)
			c.ResetsSent += grow(rate[i] * 0.2)
			c.Retransmits += grow(rate[i] * 0.5)
			if rng.Intn(4) == 0 {
				if c.ConnectFailures == nil {
					c.ConnectFailures = map[wire.ConnectErrorClass]uint64{}
				}
				c.ConnectFailures[wire.ConnectRefused] += uint64(rng.Intn(3) + 1)
			}
			for k := uint64(0); k < n; k++ {
				c.ConnectLatency.Buckets[8+rng.Intn(5)]++
				c.SRTT.Buckets[7+rng.Intn(4)]++
			}
			for j := range c.ConnAges {
				c.ConnAges[j] = uint64(rng.Intn(3))
			}
			p := *c
			p.ConnectLatency.Buckets = append([]uint64(nil), c.ConnectLatency.Buckets...)
			p.SRTT.Buckets = append([]uint64(nil), c.SRTT.Buckets...)
			p.ConnAges = append([]uint64(nil), c.ConnAges...)
			if c.ConnectFailures != nil {
				p.ConnectFailures = map[wire.ConnectErrorClass]uint64{}
				for k, v := range c.ConnectFailures {
					p.ConnectFailures[k] = v
				}
			}
			snap.Pods = append(snap.Pods, p)
		}
		out = append(out, RecordedSample{Snapshot: snap, At: at, Sent: at.Add(-2 * time.Millisecond), Received: at.Add(5 * time.Millisecond)})
	}
	return out
}

func recordOf(samples []RecordedSample) Baseline {
	return Baseline{Node: "node-a", BaselineStart: samples[0].Sent.Add(-time.Second), SwapStart: samples[len(samples)-1].Received.Add(time.Second), Baseline: samples}
}

func isProbeKey(k health.PodKey) bool { return k.Namespace == health.DefaultProbeNamespace }

// decodedAs is pod p of baseline sample i (of n) as a record keeps it:
// every count; the histograms of the first and the last sample (the others
// carry the first's); the connection ages of the last.
func decodedAs(p wire.PodCounters, first wire.Snapshot, i, n int) wire.PodCounters {
	if i != n-1 {
		p.ConnAges = nil
	}
	if i != 0 && i != n-1 {
		for _, f := range first.Pods {
			if f.UID == p.UID {
				p.ConnectLatency, p.SRTT = f.ConnectLatency, f.SRTT
			}
		}
	}
	return p
}

// TestRecordBoundedRoundTrip: a node of 500 pods with 10 samples encodes
// within the cap, the probe's pods and the most connected kept, and decodes
// to exactly the kept pods' counters and the samples' times.
func TestRecordBoundedRoundTrip(t *testing.T) {
	in := recordOf(recordSeries(500, 10, 1))
	lim := Limits{Keep: isProbeKey}
	enc, kept, err := EncodeBaseline(in, lim)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("500 pods × 10 samples: %d of 500 pods kept in %d bytes (cap %d)", kept, len(enc), DefaultBaselineBytes)
	if len(enc) > DefaultBaselineBytes {
		t.Fatalf("record is %d bytes, over the %d cap", len(enc), DefaultBaselineBytes)
	}
	if kept == 0 || kept >= 500 {
		t.Fatalf("kept %d pods of 500: want some dropped to fit", kept)
	}
	out, err := DecodeBaseline(enc)
	if err != nil {
		t.Fatal(err)
	}
	if out.Pods != 500 || out.Samples != 10 || len(out.Baseline) != 10 || out.SoakStart != nil {
		t.Fatalf("decoded %d pods, %d samples (%d kept), soak %v", out.Pods, out.Samples, len(out.Baseline), out.SoakStart)
	}
	if !out.BaselineStart.Equal(in.BaselineStart) || !out.SwapStart.Equal(in.SwapStart) || out.Node != "node-a" {
		t.Fatalf("decoded windows %s–%s of %q", out.BaselineStart, out.SwapStart, out.Node)
	}
	probe, minKept := 0, ^uint64(0)
	for i, s := range out.Baseline {
		o := in.Baseline[i]
		if !s.At.Equal(o.At) || !s.Sent.Equal(o.Sent) || !s.Received.Equal(o.Received) || !s.Snapshot.Time.Equal(o.Snapshot.Time) ||
			!s.Snapshot.StartTime.Equal(o.Snapshot.StartTime) || s.Snapshot.Seq != o.Snapshot.Seq || s.Snapshot.Mode != o.Snapshot.Mode ||
			s.Snapshot.AgentVersion != o.Snapshot.AgentVersion || s.Snapshot.Node != o.Snapshot.Node {
			t.Fatalf("sample %d decoded as %+v, was %+v", i, s, o)
		}
		if len(s.Snapshot.Pods) != kept {
			t.Fatalf("sample %d has %d pods, want the %d kept", i, len(s.Snapshot.Pods), kept)
		}
		byUID := map[string]wire.PodCounters{}
		for _, p := range o.Snapshot.Pods {
			byUID[p.UID] = p
		}
		for _, p := range s.Snapshot.Pods {
			if want := decodedAs(byUID[p.UID], in.Baseline[0].Snapshot, i, 10); !reflect.DeepEqual(p, want) {
				t.Fatalf("sample %d pod %s: decoded %+v, want %+v", i, p.UID, p, want)
			}
			if i == 0 && isProbeKey(health.KeyOf(&p)) {
				probe++
			}
		}
	}
	if probe != 2 {
		t.Errorf("%d probe pods kept, want both", probe)
	}
	// The kept pods are the most connected: none dropped had more traffic.
	first, last := in.Baseline[0].Snapshot, in.Baseline[9].Snapshot
	traffic := map[string]uint64{}
	for i := range last.Pods {
		traffic[last.Pods[i].UID] = podTraffic(&last.Pods[i]) - podTraffic(&first.Pods[i])
	}
	keptUID := map[string]bool{}
	for _, p := range out.Baseline[0].Snapshot.Pods {
		keptUID[p.UID] = true
		if !isProbeKey(health.KeyOf(&p)) {
			minKept = min(minKept, traffic[p.UID])
		}
	}
	for _, p := range last.Pods {
		if !keptUID[p.UID] && traffic[p.UID] > minKept {
			t.Errorf("pod %s (%d connections) dropped while one of %d was kept", p.UID, traffic[p.UID], minKept)
		}
	}
}

// TestRecordRealisticNode: a node of 110 pods (55 pods, both sides) over a
// 5 m baseline sampled every 30 s (11 samples) and the soak's first sample
// fits whole; its size is logged.
func TestRecordRealisticNode(t *testing.T) {
	series := recordSeries(110, 12, 2)
	// The agent checked enrollment at the ninth sample, not since: the
	// record carries that enrollment of the 55 pods onto its last sample.
	enrolled := enrollmentOf(series[8].Snapshot)
	series[8].Snapshot.Enrollment = enrolled
	in := recordOf(series[:11])
	in.SoakStart, in.SoakAt = &series[11], series[11].Sent
	enc, kept, err := EncodeBaseline(in, Limits{Keep: isProbeKey})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("110 pods × 11 samples + the soak's first: %d of 110 pods kept in %d bytes", kept, len(enc))
	if kept != 110 {
		t.Errorf("kept %d of 110 pods, want all", kept)
	}
	out, err := DecodeBaseline(enc)
	if err != nil {
		t.Fatal(err)
	}
	if out.SoakStart == nil || !out.SoakAt.Equal(in.SoakAt) || len(out.SoakStart.Snapshot.Pods) != 110 || out.SoakStart.Snapshot.Seq != series[11].Snapshot.Seq {
		t.Fatalf("soak start decoded as %+v at %s", out.SoakStart, out.SoakAt)
	}
	if got := health.EnrollmentBefore(snapshotsOf(out.Baseline)); !reflect.DeepEqual(got, enrolled) {
		t.Errorf("the enrollment before the swap decoded as %+v, want the ninth sample's %+v", got, enrolled)
	}
	if out.Baseline[len(out.Baseline)-1].Snapshot.Enrollment == nil {
		t.Error("the enrollment does not ride on the window's last sample")
	}
}

// enrollmentOf is an agent's enrollment check of a snapshot's app pods:
// every third not enrolled, its check and what it found named.
func enrollmentOf(s wire.Snapshot) *wire.Enrollment {
	e := &wire.Enrollment{Time: s.Time, Ztunnel: "pid 4242"}
	for i, p := range s.Pods {
		if p.Side != wire.SideApp {
			continue
		}
		pe := wire.PodEnrollment{Namespace: p.Namespace, Name: p.Name, UID: p.UID, Result: wire.Enrolled}
		if i%3 == 0 {
			pe.Result, pe.Failed, pe.Detail = wire.NotEnrolled, wire.CheckListeners, "nothing listens on 15008"
		}
		e.Pods = append(e.Pods, pe)
	}
	return e
}

// TestRecordThinsSamples: a baseline of 40 samples keeps 12, the first and
// the last among them.
func TestRecordThinsSamples(t *testing.T) {
	in := recordOf(recordSeries(10, 40, 3))
	// On a sample thinning drops: the enrollment before the swap stays.
	in.Baseline[37].Snapshot.Enrollment = enrollmentOf(in.Baseline[37].Snapshot)
	enc, _, err := EncodeBaseline(in, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodeBaseline(enc)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Baseline) != DefaultRecordSamples || out.Samples != 40 {
		t.Fatalf("%d samples kept of %d, want %d", len(out.Baseline), out.Samples, DefaultRecordSamples)
	}
	if !out.Baseline[0].At.Equal(in.Baseline[0].At) || !out.Baseline[11].At.Equal(in.Baseline[39].At) {
		t.Errorf("thinned to %s … %s, want the first and the last", out.Baseline[0].At, out.Baseline[11].At)
	}
	if got, want := health.EnrollmentBefore(snapshotsOf(out.Baseline)), in.Baseline[37].Snapshot.Enrollment; !reflect.DeepEqual(got, want) {
		t.Errorf("the enrollment before the swap decoded as %+v, want the 38th sample's", got)
	}
}

// TestRecordCorrupt: what DecodeBaseline cannot trust is ErrCorrupt.
func TestRecordCorrupt(t *testing.T) {
	enc, _, err := EncodeBaseline(recordOf(recordSeries(6, 4, 4)), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	flipped := []byte(enc)
	flipped[len(flipped)/2] ^= 0x01
	for name, s := range map[string]string{
		"empty":      "",
		"not base64": "%%%",
		"not gzip":   "aGVsbG8=",
		"truncated":  enc[:len(enc)/2],
		"flipped":    string(flipped),
	} {
		if _, err := DecodeBaseline(s); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
}

// TestRecordTooFewSamples: a window with one sample cannot be recorded.
func TestRecordTooFewSamples(t *testing.T) {
	_, _, err := EncodeBaseline(recordOf(recordSeries(4, 1, 5)), Limits{})
	if err == nil || !strings.Contains(err.Error(), "need at least 2") {
		t.Fatalf("err %v", err)
	}
}

// TestRecorderRestore: a successor's Recorder restored from a record
// returns the predecessor's baseline and soak start from Windows, and its
// own later samples after them.
func TestRecorderRestore(t *testing.T) {
	series := recordSeries(8, 6, 6)
	now := series[5].Received.Add(30 * time.Second)
	live := series[5].Snapshot
	live.Seq, live.Time = live.Seq+1, now
	src := health.SnapshotFunc(func(context.Context, string) (wire.Snapshot, error) { return live, nil })
	r, err := NewRecorder(RecorderConfig{Source: src, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	in := recordOf(series[:5])
	in.SoakStart, in.SoakAt = &series[5], series[5].Sent
	enc, _, err := EncodeBaseline(in, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := DecodeBaseline(enc)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Restore("node-b", rec); err == nil {
		t.Fatal("restored node-a's record into node-b")
	}
	if err := r.Restore("node-a", rec); err != nil {
		t.Fatal(err)
	}
	if err := r.Restore("node-a", rec); err != nil { // twice holds it once
		t.Fatal(err)
	}
	if err := r.Sample(context.Background(), "node-a"); err != nil {
		t.Fatal(err)
	}
	base, soak, err := r.Windows("node-a", in.BaselineStart, in.SwapStart, in.SoakAt)
	if err != nil {
		t.Fatal(err)
	}
	if len(base) != 5 || !base[0].Time.Equal(series[0].At) || !base[4].Time.Equal(series[4].At) || soak.Seq != series[5].Snapshot.Seq {
		t.Fatalf("windows after restore: %d baseline samples, soak start seq %d", len(base), soak.Seq)
	}
	if list, _, _ := r.samples("node-a"); len(list) != 7 || list[6].snap.Seq != live.Seq {
		t.Fatalf("%d samples held after restore and one live sample, want 7 ending with seq %d", len(list), live.Seq)
	}
}

func placedSnapshots(list []RecordedSample) []wire.Snapshot {
	out := make([]wire.Snapshot, len(list))
	for i, s := range list {
		out[i] = s.Snapshot
		out[i].Time = s.At
	}
	return out
}

// assessFrom judges a baseline series, a soak start and a current snapshot
// as Judge does (windows, dispersion, planned resets of an in-place swap).
func assessFrom(t *testing.T, baseline []wire.Snapshot, soakStart, cur wire.Snapshot) health.Assessment {
	t.Helper()
	cfg, err := health.NewConfig(health.Config{})
	if err != nil {
		t.Fatal(err)
	}
	base, err := health.NewWindow(baseline[0], baseline[len(baseline)-1])
	if err != nil {
		t.Fatal(err)
	}
	soak, err := health.NewWindow(soakStart, cur)
	if err != nil {
		t.Fatal(err)
	}
	disp, err := health.EstimateDispersion(baseline, cfg.CountDispersion)
	if err != nil {
		t.Fatal(err)
	}
	last := baseline[len(baseline)-1]
	planned, _ := health.PlannedDuringSwap(last, soakStart, health.PlannedResets(last, health.DrainDeadline(30*time.Second)))
	return health.Assess(cfg, base, soak, disp, planned, nil)
}

// TestRecordJudgesAsTheOriginal: a node judged from its decoded record
// (every pod kept) gets exactly the assessment the samples themselves give:
// the same rows, p-values, dispersion and planned resets.
func TestRecordJudgesAsTheOriginal(t *testing.T) {
	series := recordSeries(40, 13, 7) // 11 baseline samples, the soak's first, now
	in := recordOf(series[:11])
	in.SoakStart, in.SoakAt = &series[11], series[11].Sent
	enc, kept, err := EncodeBaseline(in, Limits{})
	if err != nil || kept != 40 {
		t.Fatalf("kept %d of 40: %v", kept, err)
	}
	out, err := DecodeBaseline(enc)
	if err != nil {
		t.Fatal(err)
	}
	cur := placedSnapshots(series[12:])[0]
	want := assessFrom(t, placedSnapshots(series[:11]), placedSnapshots(series[11:12])[0], cur)
	got := assessFrom(t, placedSnapshots(out.Baseline), placedSnapshots([]RecordedSample{*out.SoakStart})[0], cur)
	if want.Tests == 0 || want.PlannedResets == 0 {
		t.Fatalf("the original judges %d tests, %d planned resets: the check cannot tell", want.Tests, want.PlannedResets)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("judged from the record: %s, %d tests, %d planned, reasons %q; from the samples: %s, %d tests, %d planned, reasons %q",
			got.Outcome, got.Tests, got.PlannedResets, got.Reasons, want.Outcome, want.Tests, want.PlannedResets, want.Reasons)
	}
}
