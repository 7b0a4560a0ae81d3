package record

import (
	"fmt"
	"sort"
	"time"
)

// Controls is what a judgement needs of its control nodes' samples, in
// a form an orchestrator can persist (EncodeControls) beside the judged
// node's Baseline, so that a successor judges the node against its
// control group (Recorder.Restore of each node) instead of before/after
// alone. The judge reads three samples of a control node: its baseline
// window's first and last, and its first at or after the judged node's
// soak start; each Nodes entry holds those (Baseline the two, SoakStart the
// third once the soak started).
type Controls struct {
	// SwapStart names the judged node's attempt: the controls' baseline
	// window is the judged node's.
	SwapStart time.Time
	Nodes     []Baseline
	// Named counts the control nodes the record was cut for, Pods their
	// pods (of the window's last sample), before EncodeControls kept the
	// part that fits (the decoded record holds only that part).
	Named, Pods int
}

// DefaultControlsBytes caps an encoded Controls: with the judged
// node's own record (DefaultBaselineBytes) a node in flight carries at most
// 48 KiB of records in status, however many control nodes it has.
const DefaultControlsBytes = 16 << 10

// minItemBytes is less than any control node or pod adds to an encoded
// record (a pod's UID alone is 36 random characters).
const minItemBytes = 8

// controlsVersion is the encoding's version; DecodeControls refuses others.
const controlsVersion = 1

// wireControls is the encoded form: each control node as a wireRecord.
type wireControls struct {
	V     int          `json:"v"`
	Swap  int64        `json:"swap"` // SwapStart, Unix ns
	Named int          `json:"named"`
	Pods  int          `json:"pods"`
	C     []wireRecord `json:"c"`
}

// controlItem is one entry EncodeControls fits: a control node (its header:
// times, seqs, agent) or one of its pods, which needs its node's header.
type controlItem struct {
	node int // index into the ControlRecord's Nodes
	pod  *podID
}

// KeptPods counts the pods the record holds, over its control nodes (of
// the window's last sample).
func (c Controls) KeptPods() int {
	n := 0
	for _, r := range c.Nodes {
		if len(r.Baseline) > 0 {
			n += len(r.Baseline[len(r.Baseline)-1].Snapshot.Pods)
		}
	}
	return n
}

// EncodeControls keeps, of each control node, the first and the last of
// its baseline samples and its soak's first (when set), with the pods
// present in both baseline samples with one UID (the only ones the judge
// pairs), without their connection ages (read of the judged node only),
// and encodes as many as fit in MaxBytes (default
// DefaultControlsBytes): the Keep pods first (the probe's: a probe
// row is compared with the other nodes' probes only), then the most
// connected over the window across every control node; a control node is
// kept with its first pod kept, and those without a pod that fits come
// last, as they ranked. Each node's pods are encoded as EncodeBaseline does
// (every count and histogram of the three samples, exactly), the whole
// gzipped once. keptNodes and keptPods say what it kept, of c.Named and
// c.Pods. A node with fewer than two baseline samples is not recorded (the
// judge leaves it out: it has no window); none left is an error, as is a
// record that fits not one node.
func EncodeControls(c Controls, lim Limits) (enc string, keptNodes, keptPods int, err error) {
	if lim.MaxBytes <= 0 {
		lim.MaxBytes = DefaultControlsBytes
	}
	if c.Named == 0 {
		c.Named = len(c.Nodes)
	}
	type ranked struct {
		node int
		pod  rankedPod
	}
	var nodes []Baseline
	var all []ranked
	pods := 0
	for _, r := range c.Nodes {
		if len(r.Baseline) < 2 {
			continue
		}
		r.Pods = len(r.Baseline[len(r.Baseline)-1].Snapshot.Pods)
		pods += r.Pods
		r.Baseline = []RecordedSample{r.Baseline[0], r.Baseline[len(r.Baseline)-1]}
		r.Samples = 2
		for _, p := range rankedPods(r.Baseline, lim.Keep) {
			all = append(all, ranked{len(nodes), p})
		}
		nodes = append(nodes, r)
	}
	if c.Pods == 0 {
		c.Pods = pods
	}
	if len(nodes) == 0 {
		return "", 0, 0, fmt.Errorf("none of the %d control nodes has two baseline samples to record", c.Named)
	}
	sort.SliceStable(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if a.pod.keep != b.pod.keep || a.pod.traffic != b.pod.traffic {
			return a.pod.before(b.pod)
		}
		if a.node != b.node {
			return nodes[a.node].Node < nodes[b.node].Node
		}
		return a.pod.before(b.pod)
	})
	// The items in the order they are kept: a node's header before its first pod.
	var items []controlItem
	headed := make([]bool, len(nodes))
	for _, r := range all {
		if !headed[r.node] {
			headed[r.node] = true
			items = append(items, controlItem{node: r.node})
		}
		id := r.pod.id
		items = append(items, controlItem{node: r.node, pod: &id})
	}
	for i := range nodes {
		if !headed[i] {
			items = append(items, controlItem{node: i})
		}
	}
	fits := func(n int) (string, int, int, bool) {
		w := wireControls{V: controlsVersion, Swap: c.SwapStart.UnixNano(), Named: c.Named, Pods: c.Pods}
		order := []int{}
		kept := map[int][]podID{}
		present := map[int]bool{}
		for _, it := range items[:n] {
			if !present[it.node] {
				present[it.node] = true
				order = append(order, it.node)
			}
			if it.pod != nil {
				kept[it.node] = append(kept[it.node], *it.pod)
			}
		}
		sort.Ints(order) // the nodes as named
		podsKept := 0
		for _, i := range order {
			wr := wireOf(nodes[i], nil, kept[i])
			for k := range wr.P {
				wr.P[k].A = nil // connection ages: the judged node's planned resets only
			}
			w.C = append(w.C, wr)
			podsKept += len(kept[i])
		}
		s, err := pack(w, "the control group's record")
		return s, len(order), podsKept, err == nil && len(s) <= lim.MaxBytes
	}
	// No item encodes in fewer than minItemBytes, so a group of thousands
	// of pods is never encoded whole to find that it does not fit.
	hi := min(len(items), lim.MaxBytes/minItemBytes+1)
	if hi == len(items) {
		if s, kn, kp, ok := fits(hi); ok {
			return s, kn, kp, nil
		}
	}
	lo := 0 // fits(lo) holds, or lo is 0; fits(hi) does not
	for lo < hi-1 {
		mid := (lo + hi) / 2
		if s, kn, kp, ok := fits(mid); ok {
			lo, enc, keptNodes, keptPods = mid, s, kn, kp
		} else {
			hi = mid
		}
	}
	if enc == "" {
		return "", 0, 0, fmt.Errorf("not one control node's record fits in %d bytes", lim.MaxBytes)
	}
	return enc, keptNodes, keptPods, nil
}

// DecodeControls reads what EncodeControls wrote. Input it cannot read, of
// another version, or whose parts disagree is an error wrapping
// ErrCorrupt.
func DecodeControls(enc string) (Controls, error) {
	var w wireControls
	if err := unpack(enc, &w); err != nil {
		return Controls{}, err
	}
	if w.V != controlsVersion {
		return Controls{}, fmt.Errorf("%w: control record version %d, this build reads %d", ErrCorrupt, w.V, controlsVersion)
	}
	if len(w.C) == 0 {
		return Controls{}, fmt.Errorf("%w: the control record holds no control node", ErrCorrupt)
	}
	out := Controls{SwapStart: time.Unix(0, w.Swap).UTC(), Named: w.Named, Pods: w.Pods}
	for _, wr := range w.C {
		if wr.V != recordVersion {
			return Controls{}, fmt.Errorf("%w: control node %s: version %d, this build reads %d", ErrCorrupt, wr.Node, wr.V, recordVersion)
		}
		r, err := fromWire(wr)
		if err != nil {
			return Controls{}, fmt.Errorf("control node %s: %w", wr.Node, err)
		}
		if !r.SwapStart.Equal(out.SwapStart) {
			return Controls{}, fmt.Errorf("%w: control node %s is recorded for the swap at %s, the record for %s", ErrCorrupt,
				r.Node, r.SwapStart.UTC().Format(time.RFC3339Nano), out.SwapStart.UTC().Format(time.RFC3339Nano))
		}
		out.Nodes = append(out.Nodes, r)
	}
	return out, nil
}

// Node is the record of control node name, if it holds one.
func (c Controls) Node(name string) (Baseline, bool) {
	for _, r := range c.Nodes {
		if r.Node == name {
			return r, true
		}
	}
	return Baseline{}, false
}
