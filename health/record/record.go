package record

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/health/wire"
)

// Baseline is what a judgement needs of a node's samples from before
// its swap, and of its soak's first sample, in a form an orchestrator can
// persist (EncodeBaseline) so that a successor judges the node from it
// (Recorder.Restore) instead of failing it for a baseline it never saw.
type Baseline struct {
	Node string
	// BaselineStart and SwapStart are the baseline window the samples were
	// cut for (by the orchestrator's clock); SwapStart names the attempt.
	BaselineStart, SwapStart time.Time
	// Baseline are the samples surely read in the window, oldest first.
	Baseline []RecordedSample
	// SoakStart, when set, is the soak's first sample: the one sent at or
	// after the soak began (SoakAt).
	SoakStart *RecordedSample
	SoakAt    time.Time
	// Pods counts the pods (and sides) of the window's last sample, Samples
	// its samples, before EncodeBaseline kept the part that fits (the decoded
	// record holds only that part).
	Pods, Samples int
}

// RecordedSample is one agent answer as the Recorder placed it.
type RecordedSample struct {
	Snapshot       wire.Snapshot // as the agent sent it (its own Time)
	At             time.Time     // where it sits on the orchestrator's clock
	Sent, Received time.Time     // the orchestrator's clock around the request
}

// Limits bound an encoded record.
type Limits struct {
	// MaxBytes caps the encoded record (default 32 KiB): pods are dropped,
	// least connected first, until it fits.
	MaxBytes int
	// MaxSamples caps the baseline samples kept (default 12, at least 3):
	// the first, the last and evenly spaced ones between.
	MaxSamples int
	// Keep says a pod is kept ahead of the most connected, as long as the
	// record fits (the probe's pods: the judge needs their evidence).
	Keep func(health.PodKey) bool
}

// Defaults of Limits.
const (
	DefaultBaselineBytes = 32 << 10
	DefaultRecordSamples = 12
)

// ErrCorrupt is wrapped by DecodeBaseline for input it cannot read.
var ErrCorrupt = errors.New("baseline record is corrupt")

// recordVersion is the encoding's version; DecodeBaseline refuses others.
const recordVersion = 1

// EncodeBaseline thins r (MaxSamples), keeps the pods present through the
// whole baseline window (the only ones the judge compares), the Keep pods
// first and then the most connected over the window, as many as fit in
// MaxBytes, and encodes them: JSON with each pod's counters as deltas from
// its previous sample, gzip, base64. kept is how many pods it kept, of
// r.Pods. A window without two samples, or that fits no pod, is an error.
//
// It keeps what the judge reads, exactly: every kept sample's counts (the
// dispersion estimate's sub-windows), the histograms of the window's first
// and last samples and of the soak's first (the windows' latency), the
// connection ages of the window's last (the planned resets), and the
// enrollment before the swap, whole (the watchdog's and the enrollment
// gate's "before"; it decodes onto the window's last sample). The samples
// between first and last decode with the first's histograms and no ages.
func EncodeBaseline(r Baseline, lim Limits) (enc string, kept int, err error) {
	if lim.MaxBytes <= 0 {
		lim.MaxBytes = DefaultBaselineBytes
	}
	if lim.MaxSamples <= 0 {
		lim.MaxSamples = DefaultRecordSamples
	}
	lim.MaxSamples = max(lim.MaxSamples, 3)
	if len(r.Baseline) < 2 {
		return "", 0, fmt.Errorf("node %s: %d baseline samples, need at least 2 to record a baseline", r.Node, len(r.Baseline))
	}
	if r.Samples == 0 {
		r.Samples = len(r.Baseline)
	}
	if r.Pods == 0 {
		r.Pods = len(r.Baseline[len(r.Baseline)-1].Snapshot.Pods)
	}
	before := health.EnrollmentBefore(snapshotsOf(r.Baseline))
	r.Baseline = thin(r.Baseline, lim.MaxSamples)
	ranked := rankPods(r.Baseline, lim.Keep)
	// The most pods that fit: encodings shrink as pods go, so search.
	fits := func(n int) (string, bool) {
		s, err := encodeWire(r, before, ranked[:n])
		return s, err == nil && len(s) <= lim.MaxBytes
	}
	lo, hi := 0, len(ranked) // fits(lo) holds, or lo is 0
	best, ok := fits(hi)
	if ok {
		return best, hi, nil
	}
	best = ""
	for lo < hi-1 {
		mid := (lo + hi) / 2
		if s, ok := fits(mid); ok {
			lo, best = mid, s
		} else {
			hi = mid
		}
	}
	if best == "" {
		return "", 0, fmt.Errorf("node %s: not one pod of the baseline fits in %d bytes", r.Node, lim.MaxBytes)
	}
	return best, lo, nil
}

// thin keeps at most n samples: the first, the last and evenly spaced ones
// between (the dispersion estimate's sub-windows then merely grow).
func thin(list []RecordedSample, n int) []RecordedSample {
	if len(list) <= n {
		return list
	}
	out := make([]RecordedSample, 0, n)
	last := -1
	for j := range n {
		i := (j*(len(list)-1) + (n-1)/2) / (n - 1)
		if i != last {
			out = append(out, list[i])
			last = i
		}
	}
	return out
}

// podID is one pod (and side) as the record keeps it: a key and a UID.
type podID struct {
	key health.PodKey
	uid string
}

// rankPods lists the pods present, with one UID, in the first and the last
// baseline sample: keep's first, then by traffic over the window, most
// first, then by key.
func rankPods(list []RecordedSample, keep func(health.PodKey) bool) []podID {
	ranked := rankedPods(list, keep)
	out := make([]podID, len(ranked))
	for i, c := range ranked {
		out[i] = c.id
	}
	return out
}

// rankedPod is a pod rankPods lists, with what it was ranked by.
type rankedPod struct {
	id      podID
	keep    bool
	traffic uint64
}

// before orders pods as rankPods does: keep's first, then the most
// traffic, then by key.
func (a rankedPod) before(b rankedPod) bool {
	if a.keep != b.keep {
		return a.keep
	}
	if a.traffic != b.traffic {
		return a.traffic > b.traffic
	}
	if a.id.key != b.id.key {
		return a.id.key.Less(b.id.key)
	}
	return a.id.uid < b.id.uid
}

func rankedPods(list []RecordedSample, keep func(health.PodKey) bool) []rankedPod {
	first, last := list[0].Snapshot, list[len(list)-1].Snapshot
	start := map[podID]uint64{}
	for i := range first.Pods {
		p := &first.Pods[i]
		start[podID{health.KeyOf(p), p.UID}] = podTraffic(p)
	}
	var cs []rankedPod
	for i := range last.Pods {
		p := &last.Pods[i]
		id := podID{health.KeyOf(p), p.UID}
		t0, ok := start[id]
		if !ok {
			continue
		}
		var d uint64
		if t := podTraffic(p); t > t0 {
			d = t - t0
		}
		cs = append(cs, rankedPod{id, keep != nil && keep(id.key), d})
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].before(cs[j]) })
	return cs
}

// podTraffic is the pod's connections: opened, accepted and failed.
func podTraffic(p *wire.PodCounters) uint64 {
	var f uint64
	for _, n := range p.ConnectFailures {
		f += n
	}
	return p.Connects + p.Accepts + f
}

// wireRecord is the encoded form. Times are nanoseconds since Base (the
// baseline's start); each sample's row of a pod is its counters, zigzag
// deltas from the pod's previous row when the histograms' lengths match.
type wireRecord struct {
	V       int    `json:"v"`
	Node    string `json:"node"`
	Base    int64  `json:"base"` // BaselineStart, Unix ns
	Swap    int64  `json:"swap"`
	SoakAt  int64  `json:"soakAt,omitempty"`
	Soak    bool   `json:"soak,omitempty"` // the last sample is the soak's first
	Pods    int    `json:"pods"`
	Samples int    `json:"samples"`
	// Per sample: agent time, placed time, sent, received (ns since Base).
	T     [][4]int64 `json:"t"`
	Start []int64    `json:"start"` // the agent's StartTime, Unix ns
	Seq   []uint64   `json:"seq"`
	Mode  []string   `json:"mode"`
	Agent []string   `json:"agent"`
	P     []wirePod  `json:"p"`
	// E is the enrollment before the swap (the last baseline sample's that
	// carries one, whichever sample thinning kept): every pod of it, so a
	// successor's watchdog and gate compare with what this one would have.
	// It decodes onto the window's last sample.
	E *wire.Enrollment `json:"e,omitempty"`
}

type wirePod struct {
	Namespace string    `json:"ns"`
	Name      string    `json:"n"`
	UID       string    `json:"u"`
	Side      wire.Side `json:"s"`
	// Classes are the connect failure classes in any sample, in C's order.
	Classes []wire.ConnectErrorClass `json:"f,omitempty"`
	// C has a row per sample (null: absent from it): ResetsSent,
	// ResetsReceived, Connects, Accepts, Retransmits and the failure
	// classes, as deltas from the pod's previous row.
	C [][]uint64 `json:"c"`
	// H has a row for the samples whose histograms the judge reads (the
	// window's first and last, the soak's first; null for the others): the
	// lengths of ConnectLatency and SRTT, then their buckets, as deltas
	// from the previous row when the lengths match.
	H [][]uint64 `json:"h"`
	// A is ConnAges at the window's last sample (the planned resets).
	A []uint64 `json:"a,omitempty"`
}

const rowScalars = 5

// maxRowLen bounds a histogram's length in a row DecodeBaseline accepts.
const maxRowLen = 1 << 10

// fullSample says the judge reads sample i's histograms: the baseline's
// first and last (i < base), the soak's first (i == base).
func fullSample(i, base int) bool { return i == 0 || i >= base-1 }

func encodeWire(r Baseline, before *wire.Enrollment, pods []podID) (string, error) {
	return pack(wireOf(r, before, pods), "the baseline record of node "+r.Node)
}

// snapshotsOf lists the samples' snapshots.
func snapshotsOf(list []RecordedSample) []wire.Snapshot {
	out := make([]wire.Snapshot, len(list))
	for i, s := range list {
		out[i] = s.Snapshot
	}
	return out
}

// wireOf is r's wire form with the pods listed and the enrollment before
// the swap.
func wireOf(r Baseline, before *wire.Enrollment, pods []podID) wireRecord {
	samples := append([]RecordedSample(nil), r.Baseline...)
	base := len(samples)
	w := wireRecord{V: recordVersion, Node: r.Node, Base: r.BaselineStart.UnixNano(), Swap: r.SwapStart.UnixNano(), Pods: r.Pods, Samples: r.Samples, E: before}
	if r.SoakStart != nil {
		samples = append(samples, *r.SoakStart)
		w.Soak, w.SoakAt = true, r.SoakAt.UnixNano()
	}
	rel := func(t time.Time) int64 { return t.UnixNano() - w.Base }
	for _, s := range samples {
		w.T = append(w.T, [4]int64{rel(s.Snapshot.Time), rel(s.At), rel(s.Sent), rel(s.Received)})
		w.Start = append(w.Start, s.Snapshot.StartTime.UnixNano())
		w.Seq = append(w.Seq, s.Snapshot.Seq)
		w.Mode = append(w.Mode, s.Snapshot.Mode)
		w.Agent = append(w.Agent, s.Snapshot.AgentVersion)
	}
	for _, id := range pods {
		wp := wirePod{Namespace: id.key.Namespace, Name: id.key.Name, UID: id.uid, Side: id.key.Side}
		rows := make([]*wire.PodCounters, len(samples))
		classes := map[wire.ConnectErrorClass]bool{}
		for i, s := range samples {
			for j := range s.Snapshot.Pods {
				p := &s.Snapshot.Pods[j]
				if p.UID == id.uid && health.KeyOf(p) == id.key {
					rows[i] = p
					for c := range p.ConnectFailures {
						classes[c] = true
					}
					break
				}
			}
		}
		for c := range classes {
			wp.Classes = append(wp.Classes, c)
		}
		sort.Slice(wp.Classes, func(i, j int) bool { return wp.Classes[i] < wp.Classes[j] })
		var prevC, prevH []uint64
		for i, p := range rows {
			if p == nil {
				wp.C, wp.H = append(wp.C, nil), append(wp.H, nil)
				continue
			}
			c := counterRow(p, wp.Classes)
			wp.C = append(wp.C, delta(prevC, c, 0))
			prevC = c
			if !fullSample(i, base) {
				wp.H = append(wp.H, nil)
				continue
			}
			h := histRow(p)
			wp.H = append(wp.H, delta(prevH, h, 2))
			prevH = h
			if i == base-1 {
				wp.A = append([]uint64(nil), p.ConnAges...)
			}
		}
		w.P = append(w.P, wp)
	}
	return w
}

// pack encodes v as the records are: JSON, gzip, base64.
func pack(v any, what string) (string, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encoding %s: %w", what, err)
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if _, err := zw.Write(data); err != nil {
		return "", fmt.Errorf("compressing %s: %w", what, err)
	}
	if err := zw.Close(); err != nil {
		return "", fmt.Errorf("compressing %s: %w", what, err)
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes()), nil
}

func counterRow(p *wire.PodCounters, classes []wire.ConnectErrorClass) []uint64 {
	row := []uint64{p.ResetsSent, p.ResetsReceived, p.Connects, p.Accepts, p.Retransmits}
	for _, c := range classes {
		row = append(row, p.ConnectFailures[c])
	}
	return row
}

func histRow(p *wire.PodCounters) []uint64 {
	row := []uint64{uint64(len(p.ConnectLatency.Buckets)), uint64(len(p.SRTT.Buckets))}
	row = append(row, p.ConnectLatency.Buckets...)
	return append(row, p.SRTT.Buckets...)
}

// delta is row as zigzag deltas from prev after its first fixed entries
// (kept as they are), when prev has the same length and fixed entries;
// else row itself.
func delta(prev, row []uint64, fixed int) []uint64 {
	if !sameLayout(prev, row, fixed) {
		return row
	}
	out := make([]uint64, len(row))
	copy(out, row[:fixed])
	for k := fixed; k < len(row); k++ {
		out[k] = zigzag(int64(row[k] - prev[k]))
	}
	return out
}

// undelta reverses delta.
func undelta(prev, out []uint64, fixed int) []uint64 {
	if !sameLayout(prev, out, fixed) {
		return out
	}
	row := make([]uint64, len(out))
	copy(row, out[:fixed])
	for k := fixed; k < len(out); k++ {
		row[k] = prev[k] + uint64(unzigzag(out[k]))
	}
	return row
}

func sameLayout(prev, row []uint64, fixed int) bool {
	if prev == nil || len(prev) != len(row) {
		return false
	}
	for k := range fixed {
		if prev[k] != row[k] {
			return false
		}
	}
	return true
}

func zigzag(v int64) uint64   { return uint64(v<<1) ^ uint64(v>>63) }
func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }

// DecodeBaseline reads what EncodeBaseline wrote. Input it cannot read, of
// another version, or whose parts disagree is an error wrapping
// ErrCorrupt.
func DecodeBaseline(enc string) (Baseline, error) {
	var w wireRecord
	if err := unpack(enc, &w); err != nil {
		return Baseline{}, err
	}
	if w.V != recordVersion {
		return Baseline{}, fmt.Errorf("%w: version %d, this build reads %d", ErrCorrupt, w.V, recordVersion)
	}
	return fromWire(w)
}

// unpack reverses pack; its errors wrap ErrCorrupt.
func unpack(enc string, v any) error {
	raw, err := base64.StdEncoding.DecodeString(enc)
	if err != nil {
		return fmt.Errorf("%w: base64: %v", ErrCorrupt, err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("%w: gzip: %v", ErrCorrupt, err)
	}
	data, err := io.ReadAll(io.LimitReader(zr, 16<<20))
	if err != nil {
		return fmt.Errorf("%w: gzip: %v", ErrCorrupt, err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%w: json: %v", ErrCorrupt, err)
	}
	return nil
}

// fromWire is the record w holds, checked: parts that disagree are an
// error wrapping ErrCorrupt.
func fromWire(w wireRecord) (Baseline, error) {
	corrupt := func(format string, args ...any) (Baseline, error) {
		return Baseline{}, fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
	}
	n := len(w.T)
	if len(w.Start) != n || len(w.Seq) != n || len(w.Mode) != n || len(w.Agent) != n {
		return corrupt("%d sample times but %d start times, %d seqs, %d modes, %d agent versions", n, len(w.Start), len(w.Seq), len(w.Mode), len(w.Agent))
	}
	base := n
	if w.Soak {
		base--
	}
	if base < 2 {
		return corrupt("%d baseline samples, need at least 2", base)
	}
	at := func(ns int64) time.Time { return time.Unix(0, w.Base+ns).UTC() }
	samples := make([]RecordedSample, n)
	for i, t := range w.T {
		samples[i] = RecordedSample{At: at(t[1]), Sent: at(t[2]), Received: at(t[3]),
			Snapshot: wire.Snapshot{Node: w.Node, Time: at(t[0]), StartTime: time.Unix(0, w.Start[i]).UTC(), Seq: w.Seq[i], Mode: w.Mode[i], AgentVersion: w.Agent[i]}}
	}
	for _, wp := range w.P {
		if len(wp.C) != n || len(wp.H) != n {
			return corrupt("pod %s/%s has %d counter rows and %d histogram rows for %d samples", wp.Namespace, wp.Name, len(wp.C), len(wp.H), n)
		}
		if len(wp.A) > maxRowLen {
			return corrupt("pod %s/%s: %d connection age buckets", wp.Namespace, wp.Name, len(wp.A))
		}
		var prevC, prevH []uint64
		for i, out := range wp.C {
			if out == nil {
				continue
			}
			if len(out) != rowScalars+len(wp.Classes) {
				return corrupt("pod %s/%s sample %d: %d counters, want %d", wp.Namespace, wp.Name, i, len(out), rowScalars+len(wp.Classes))
			}
			c := undelta(prevC, out, 0)
			prevC = c
			if h := wp.H[i]; h != nil {
				if len(h) < 2 || h[0] > maxRowLen || h[1] > maxRowLen || uint64(len(h)) != 2+h[0]+h[1] {
					return corrupt("pod %s/%s sample %d: a histogram row of %d values", wp.Namespace, wp.Name, i, len(h))
				}
				prevH = undelta(prevH, h, 2)
			}
			p := podOf(wp, c, prevH)
			if i == base-1 {
				p.ConnAges = append([]uint64(nil), wp.A...)
				if len(p.ConnAges) == 0 {
					p.ConnAges = nil
				}
			}
			samples[i].Snapshot.Pods = append(samples[i].Snapshot.Pods, p)
		}
	}
	samples[base-1].Snapshot.Enrollment = w.E
	r := Baseline{Node: w.Node, BaselineStart: time.Unix(0, w.Base).UTC(), SwapStart: time.Unix(0, w.Swap).UTC(),
		Baseline: samples[:base], Pods: w.Pods, Samples: w.Samples}
	if w.Soak {
		r.SoakStart, r.SoakAt = &samples[n-1], time.Unix(0, w.SoakAt).UTC()
	}
	return r, nil
}

// podOf is a pod's counters from its counter row and the histogram row
// in effect (its own, or for a sample between the window's first and last,
// the first's: the judge subtracts only those).
func podOf(wp wirePod, c, h []uint64) wire.PodCounters {
	p := wire.PodCounters{Namespace: wp.Namespace, Name: wp.Name, UID: wp.UID, Side: wp.Side,
		ResetsSent: c[0], ResetsReceived: c[1], Connects: c[2], Accepts: c[3], Retransmits: c[4]}
	for k, cl := range wp.Classes {
		if v := c[rowScalars+k]; v != 0 {
			if p.ConnectFailures == nil {
				p.ConnectFailures = map[wire.ConnectErrorClass]uint64{}
			}
			p.ConnectFailures[cl] = v
		}
	}
	if len(h) >= 2 {
		n1, n2 := int(h[0]), int(h[1])
		if n1 > 0 {
			p.ConnectLatency.Buckets = append([]uint64(nil), h[2:2+n1]...)
		}
		if n2 > 0 {
			p.SRTT.Buckets = append([]uint64(nil), h[2+n1:2+n1+n2]...)
		}
	}
	return p
}
