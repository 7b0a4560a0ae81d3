package health

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nodewise/nodewise/health/wire"
)

// Errors NewWindow returns when two snapshots cannot be subtracted. Each one
// means the counters cannot be trusted, so the judge fails closed on them.
var (
	// ErrAgentRestarted: the snapshots have different StartTimes, so the
	// agent's counters were reset between them.
	ErrAgentRestarted = errors.New("agent restarted between snapshots (start times differ)")
	// ErrTimeNotIncreasing: the later snapshot is not later.
	ErrTimeNotIncreasing = errors.New("snapshot time did not increase")
	// ErrNodeMismatch: the snapshots come from different nodes.
	ErrNodeMismatch = errors.New("snapshots come from different nodes")
	// ErrCounterDecreased: a cumulative counter went down for the same pod UID.
	ErrCounterDecreased = errors.New("a cumulative counter decreased")
)

// Counts are the events of one pod and side (or of a whole node) in a window.
type Counts struct {
	ResetsReceived  uint64 `json:"resetsReceived"`
	ResetsSent      uint64 `json:"resetsSent"`
	Connects        uint64 `json:"connects"`
	Accepts         uint64 `json:"accepts"`
	ConnectFailures uint64 `json:"connectFailures"`
	Retransmits     uint64 `json:"retransmits"`
}

// PodKey names one pod and side on a node.
type PodKey struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	Side      wire.Side `json:"side"`
}

func (k PodKey) String() string {
	if k.Side == wire.SideProxy {
		return k.Namespace + "/" + k.Name + " (proxy)"
	}
	return k.Namespace + "/" + k.Name
}

// PodWindow is one pod and side's events in a window.
type PodWindow struct {
	PodKey
	UID string `json:"uid"`
	// Duration is how long the pod was observed in the window: the whole window,
	// or less when the pod appeared during it.
	Duration       time.Duration      `json:"duration"`
	Counts         Counts             `json:"counts"`
	ConnectLatency wire.Log2Histogram `json:"connectLatency"`
	SRTT           wire.Log2Histogram `json:"srtt"`
	// Appeared says the pod was not in the earlier snapshot (or had another UID).
	Appeared bool `json:"appeared,omitempty"`
}

// Window is what happened on one node between two snapshots.
type Window struct {
	Node     string        `json:"node"`
	Start    time.Time     `json:"start"`
	End      time.Time     `json:"end"`
	Duration time.Duration `json:"duration"`
	Mode     string        `json:"mode"`
	// Pods is sorted by namespace, name, side. Pods present only in the earlier
	// snapshot (gone during the window) are left out and counted in Gone.
	Pods []PodWindow `json:"pods"`
	Gone int         `json:"gone"`
	// Totals sums every pod and side.
	Totals         Counts             `json:"totals"`
	ConnectLatency wire.Log2Histogram `json:"connectLatency"`
	SRTT           wire.Log2Histogram `json:"srtt"`
}

// NewWindow subtracts snapshot from from snapshot to. It refuses snapshots that
// cannot be subtracted (another node, an agent restart, time not increasing, a
// counter going backwards): the caller must fail closed on any error.
func NewWindow(from, to wire.Snapshot) (Window, error) {
	if from.Node != to.Node {
		return Window{}, fmt.Errorf("subtracting snapshots of %q and %q: %w", from.Node, to.Node, ErrNodeMismatch)
	}
	if !from.StartTime.Equal(to.StartTime) {
		return Window{}, fmt.Errorf("node %s: agent start %s then %s: %w", to.Node,
			from.StartTime.UTC().Format(time.RFC3339), to.StartTime.UTC().Format(time.RFC3339), ErrAgentRestarted)
	}
	if !to.Time.After(from.Time) {
		return Window{}, fmt.Errorf("node %s: snapshot at %s is not after %s: %w", to.Node,
			to.Time.UTC().Format(time.RFC3339Nano), from.Time.UTC().Format(time.RFC3339Nano), ErrTimeNotIncreasing)
	}
	w := Window{
		Node: to.Node, Start: from.Time, End: to.Time, Duration: to.Time.Sub(from.Time), Mode: to.Mode,
		ConnectLatency: newHist(), SRTT: newHist(),
	}
	before := make(map[PodKey]*wire.PodCounters, len(from.Pods))
	for i := range from.Pods {
		p := &from.Pods[i]
		before[KeyOf(p)] = p
	}
	seen := make(map[PodKey]bool, len(to.Pods))
	for i := range to.Pods {
		a := &to.Pods[i]
		k := KeyOf(a)
		seen[k] = true
		pw := PodWindow{PodKey: k, UID: a.UID, Duration: w.Duration}
		b, ok := before[k]
		if !ok || b.UID != a.UID {
			// The pod's counters started when it appeared, inside the window.
			pw.Appeared = true
			b = &wire.PodCounters{}
		}
		var err error
		if pw.Counts, err = subCounts(b, a); err != nil {
			return Window{}, fmt.Errorf("node %s pod %s: %w", to.Node, k, err)
		}
		if pw.ConnectLatency, err = subHist(b.ConnectLatency, a.ConnectLatency); err != nil {
			return Window{}, fmt.Errorf("node %s pod %s connect latency: %w", to.Node, k, err)
		}
		if pw.SRTT, err = subHist(b.SRTT, a.SRTT); err != nil {
			return Window{}, fmt.Errorf("node %s pod %s srtt: %w", to.Node, k, err)
		}
		w.Pods = append(w.Pods, pw)
		w.Totals = w.Totals.add(pw.Counts)
		addHist(&w.ConnectLatency, pw.ConnectLatency)
		addHist(&w.SRTT, pw.SRTT)
	}
	for k := range before {
		if !seen[k] {
			w.Gone++
		}
	}
	sort.Slice(w.Pods, func(i, j int) bool { return w.Pods[i].PodKey.Less(w.Pods[j].PodKey) })
	return w, nil
}

// Less orders keys by namespace, name, then side.
func (k PodKey) Less(o PodKey) bool {
	if k.Namespace != o.Namespace {
		return k.Namespace < o.Namespace
	}
	if k.Name != o.Name {
		return k.Name < o.Name
	}
	return k.Side < o.Side
}

// KeyOf is the key of a pod's counters; an agent that leaves Side empty
// counts the application's side.
func KeyOf(p *wire.PodCounters) PodKey {
	side := p.Side
	if side == "" {
		side = wire.SideApp
	}
	return PodKey{Namespace: p.Namespace, Name: p.Name, Side: side}
}

func failures(p *wire.PodCounters) uint64 {
	var n uint64
	for _, v := range p.ConnectFailures {
		n += v
	}
	return n
}

func subCounts(b, a *wire.PodCounters) (Counts, error) {
	type pair struct {
		name string
		b, a uint64
		out  *uint64
	}
	var c Counts
	for _, p := range []pair{
		{"resetsReceived", b.ResetsReceived, a.ResetsReceived, &c.ResetsReceived},
		{"resetsSent", b.ResetsSent, a.ResetsSent, &c.ResetsSent},
		{"connects", b.Connects, a.Connects, &c.Connects},
		{"accepts", b.Accepts, a.Accepts, &c.Accepts},
		{"connectFailures", failures(b), failures(a), &c.ConnectFailures},
		{"retransmits", b.Retransmits, a.Retransmits, &c.Retransmits},
	} {
		if p.a < p.b {
			return Counts{}, fmt.Errorf("%s %d → %d: %w", p.name, p.b, p.a, ErrCounterDecreased)
		}
		*p.out = p.a - p.b
	}
	return c, nil
}

// Traffic is the connections the pod made, accepted or tried: the exposure
// the judge divides counts by, so a burst of traffic is not a regression.
func (c Counts) Traffic() uint64 { return c.Connects + c.Accepts + c.ConnectFailures }

func (c Counts) add(o Counts) Counts {
	c.ResetsReceived += o.ResetsReceived
	c.ResetsSent += o.ResetsSent
	c.Connects += o.Connects
	c.Accepts += o.Accepts
	c.ConnectFailures += o.ConnectFailures
	c.Retransmits += o.Retransmits
	return c
}

func newHist() wire.Log2Histogram {
	return wire.Log2Histogram{Buckets: make([]uint64, wire.Log2Buckets)}
}

func subHist(b, a wire.Log2Histogram) (wire.Log2Histogram, error) {
	out := newHist()
	for i := range out.Buckets {
		var bv, av uint64
		if i < len(b.Buckets) {
			bv = b.Buckets[i]
		}
		if i < len(a.Buckets) {
			av = a.Buckets[i]
		}
		if av < bv {
			return wire.Log2Histogram{}, fmt.Errorf("bucket %d %d → %d: %w", i, bv, av, ErrCounterDecreased)
		}
		out.Buckets[i] = av - bv
	}
	return out, nil
}

func addHist(dst *wire.Log2Histogram, h wire.Log2Histogram) {
	for i := range dst.Buckets {
		if i < len(h.Buckets) {
			dst.Buckets[i] += h.Buckets[i]
		}
	}
}
