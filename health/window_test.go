package health

import (
	"errors"
	"testing"
	"time"

	"github.com/nodewise/nodewise/health/wire"
)

func pc(ns, name, uid string, side wire.Side, rr, rs, conns uint64) wire.PodCounters {
	return wire.PodCounters{Namespace: ns, Name: name, UID: uid, Side: side, ResetsReceived: rr, ResetsSent: rs, Connects: conns,
		ConnectLatency: newHist(), SRTT: newHist(), ConnAges: make([]uint64, len(wire.AgeBucketBoundsSeconds)+1)}
}

func TestNewWindow(t *testing.T) {
	start := time.Date(2026, 11, 30, 4, 0, 0, 0, time.UTC)
	from := wire.Snapshot{Node: "n1", StartTime: start, Time: start.Add(time.Minute), Pods: []wire.PodCounters{
		pc("shop", "cart", "u1", wire.SideApp, 10, 5, 100),
		pc("shop", "cart", "u1", wire.SideProxy, 1, 2, 50),
		pc("shop", "gone", "u9", wire.SideApp, 1, 1, 1),
		pc("shop", "moved", "u2", wire.SideApp, 40, 0, 400),
	}}
	from.Pods[0].ConnectLatency.Buckets[10] = 7
	to := wire.Snapshot{Node: "n1", StartTime: start, Time: start.Add(3 * time.Minute), Pods: []wire.PodCounters{
		pc("shop", "cart", "u1", wire.SideApp, 25, 5, 160),
		pc("shop", "cart", "u1", wire.SideProxy, 1, 4, 80),
		pc("shop", "moved", "u3", wire.SideApp, 3, 0, 30), // same name, new UID: a new pod
		pc("web", "new", "u4", wire.SideApp, 2, 0, 20),
	}}
	to.Pods[0].ConnectLatency.Buckets[10] = 10
	w, err := NewWindow(from, to)
	if err != nil {
		t.Fatal(err)
	}
	if w.Duration != 2*time.Minute || w.Gone != 1 || len(w.Pods) != 4 {
		t.Fatalf("duration %s gone %d pods %d, want 2m, 1, 4", w.Duration, w.Gone, len(w.Pods))
	}
	app := w.Pods[0]
	if app.Side != wire.SideApp || app.Name != "cart" || app.Counts.ResetsReceived != 15 || app.Counts.Connects != 60 || app.ConnectLatency.Buckets[10] != 3 {
		t.Errorf("cart app window %+v", app)
	}
	if p := w.Pods[1]; p.Side != wire.SideProxy || p.Counts.ResetsSent != 2 {
		t.Errorf("cart proxy window %+v", p)
	}
	if m := w.Pods[2]; m.Name != "moved" || !m.Appeared || m.Counts.ResetsReceived != 3 {
		t.Errorf("re-created pod must count from zero: %+v", m)
	}
	if w.Totals.ResetsReceived != 15+0+3+2 || w.Totals.Connects != 60+30+30+20 {
		t.Errorf("totals %+v", w.Totals)
	}

	restarted := to
	restarted.StartTime = start.Add(2 * time.Minute)
	older := to
	older.Time = from.Time
	other := to
	other.Node = "n2"
	backwards := to
	backwards.Pods = append([]wire.PodCounters(nil), to.Pods...)
	backwards.Pods[0].ResetsReceived = 1
	for _, c := range []struct {
		name string
		to   wire.Snapshot
		want error
	}{
		{"agent restarted", restarted, ErrAgentRestarted},
		{"time not increasing", older, ErrTimeNotIncreasing},
		{"other node", other, ErrNodeMismatch},
		{"counter decreased", backwards, ErrCounterDecreased},
	} {
		if _, err := NewWindow(from, c.to); !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", c.name, err, c.want)
		}
	}
}

func TestDrainDeadline(t *testing.T) {
	for grace, want := range map[time.Duration]time.Duration{
		30 * time.Second: 25 * time.Second, 10 * time.Second: 9 * time.Second, 5 * time.Second: 4 * time.Second, 0: 5 * time.Second,
	} {
		if got := DrainDeadline(grace); got != want {
			t.Errorf("DrainDeadline(%s) = %s, want %s", grace, got, want)
		}
	}
}

func TestPlannedResets(t *testing.T) {
	s := wire.Snapshot{Pods: []wire.PodCounters{pc("shop", "cart", "u1", wire.SideApp, 0, 0, 0), pc("shop", "db", "u2", wire.SideApp, 0, 0, 0)}}
	// Bounds ... 20, 25, 30 ...: index 7 is [20, 25), 8 is [25, 30), 9 is [30, 45), last is ≥ 3600.
	s.Pods[0].ConnAges[7] = 100 // younger than 25 s: not planned
	s.Pods[0].ConnAges[8] = 3
	s.Pods[0].ConnAges[16] = 4
	s.Pods[1].ConnAges[0] = 50
	got := PlannedResets(s, 25*time.Second)
	if len(got) != 1 || got[PodKey{"shop", "cart", wire.SideApp}] != 7 {
		t.Errorf("planned at 25s = %v, want cart: 7", got)
	}
	// A deadline between bounds (27 s) counts only buckets entirely above it.
	if got := PlannedResets(s, 27*time.Second); got[PodKey{"shop", "cart", wire.SideApp}] != 4 {
		t.Errorf("planned at 27s = %v, want cart: 4", got)
	}

	// Subtracting: received first, then sent, at most one per old connection.
	w := Window{Pods: []PodWindow{{PodKey: PodKey{"shop", "cart", wire.SideApp}, Counts: Counts{ResetsReceived: 5, ResetsSent: 10}}}}
	removed := subtractPlanned(&w, got)
	if c := w.Pods[0].Counts; c.ResetsReceived != 0 || c.ResetsSent != 8 || removed[w.Pods[0].PodKey] != 7 || w.Totals.ResetsSent != 8 {
		t.Errorf("after subtracting 7: %+v removed %v", c, removed)
	}
}
