package nodeagent

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/nodewise/nodewise/bpf"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/health/wire"
)

// busyNode is a snapshot of a full node (pods × both sides) whose counters
// have every bucket in use with values of realistic size after a day of
// traffic: the history's worst case for compression short of noise.
func busyNode(pods int, at time.Time, seq uint64, rng *rand.Rand) wire.Snapshot {
	r := reading{counters: map[bpf.Key]*bpf.Counters{}, ages: map[bpf.Key][]uint64{}}
	res := map[uint32]Pod{}
	for i := range pods {
		ns := uint32(4026531000 + i)
		res[ns] = Pod{Namespace: fmt.Sprintf("team-%02d", i%20), Name: fmt.Sprintf("checkout-7f9c6d5b8-%05d", i), UID: fmt.Sprintf("0b6f4f2e-8c3d-4a51-9e7a-%012d", i)}
		for _, side := range []uint32{bpf.SideApp, bpf.SideProxy} {
			c := &bpf.Counters{ResetsSent: rng.Uint64N(1e5), ResetsReceived: rng.Uint64N(1e5), Connects: rng.Uint64N(1e8), Accepts: rng.Uint64N(1e8), Retransmits: rng.Uint64N(1e6)}
			for j := range c.ConnectFailures {
				c.ConnectFailures[j] = rng.Uint64N(1e4)
			}
			for j := range c.ConnectLatency {
				c.ConnectLatency[j] = rng.Uint64N(1e7)
				c.SRTT[j] = rng.Uint64N(1e7)
			}
			ages := make([]uint64, len(wire.AgeBucketBoundsSeconds)+1)
			for j := range ages {
				ages[j] = rng.Uint64N(100)
			}
			k := bpf.Key{Netns: ns, Side: side}
			r.counters[k], r.ages[k] = c, ages
		}
	}
	return buildSnapshot(snapshotMeta{node: "n1", mode: wire.ModeEBPF, version: "test", start: at.Add(-24 * time.Hour), now: at, seq: seq}, r, res)
}

// TestHistoryMemoryBoundAt110Pods fills a ring at the defaults (one
// snapshot every 30 s for an hour) with a 110-pod node whose every counter
// and bucket is busy, and checks the memory bound docs/nodeagent.md states:
// under 12 MiB for the hour in that worst case, and never above
// HistoryMaxBytes whatever the pods, the oldest snapshots going first.
func TestHistoryMemoryBoundAt110Pods(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	h := newHistory(DefaultHistoryEvery, DefaultHistoryKeep, DefaultHistoryMaxBytes)
	t0 := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	n := int(DefaultHistoryKeep/DefaultHistoryEvery) + 1
	var raw int
	for i := range n + 10 { // ten past the hour: the oldest go
		s := busyNode(110, t0.Add(time.Duration(i)*DefaultHistoryEvery), uint64(i+1), rng)
		if i == 0 {
			b, _ := json.Marshal(s)
			raw = len(b)
		}
		if err := h.add(s); err != nil {
			t.Fatal(err)
		}
	}
	entries, bytes := h.size()
	t.Logf("110 pods: %d snapshots kept (1 h at 30 s), %d bytes (%.1f KiB each; %d KiB as JSON)", entries, bytes, float64(bytes)/float64(entries)/1024, raw/1024)
	if entries != n {
		t.Errorf("kept %d snapshots, want %d (an hour at 30 s, both ends)", entries, n)
	}
	if bytes > 12<<20 {
		t.Errorf("the hour takes %d bytes, over the documented 12 MiB", bytes)
	}
	got, err := h.since(time.Time{})
	if err != nil || len(got) != n || !got[0].Time.Equal(t0.Add(10*DefaultHistoryEvery)) || got[n-1].Seq != uint64(n+10) || len(got[0].Pods) != 220 {
		t.Fatalf("since(0): %d snapshots, err %v", len(got), err)
	}

	// The byte bound holds with any pod count: a tight one keeps fewer.
	small := newHistory(DefaultHistoryEvery, DefaultHistoryKeep, bytes/20)
	for i := range 12 {
		if err := small.add(busyNode(110, t0.Add(time.Duration(i)*DefaultHistoryEvery), uint64(i+1), rng)); err != nil {
			t.Fatal(err)
		}
	}
	if e, b := small.size(); b > bytes/20 || e >= 12 || e < 2 {
		t.Errorf("bounded to %d bytes: kept %d snapshots in %d bytes", bytes/20, e, b)
	}
}

// TestHistoryServedWithTheSnapshotsCredential checks /v1/history: the
// snapshots taken every HistoryEvery since the agent started, with its
// start time, filtered by since, behind the same token as /v1/snapshot;
// each one subtracts from another as any two snapshots do.
func TestHistoryServedWithTheSnapshotsCredential(t *testing.T) {
	fp := &fakeProbe{counters: map[bpf.Key]*bpf.Counters{{Netns: 100, Side: bpf.SideApp}: {Connects: 7}}}
	res := NewStaticResolver(map[uint32]Pod{100: {Namespace: "shop", Name: "cart-1", UID: "u1"}})
	ra := startAgent(t, ModeEBPF, res, func(c *Config) {
		fakeLoaded(fp)(c)
		c.HistoryEvery, c.HistoryKeep = 20*time.Millisecond, time.Minute
	})
	if code, _ := ra.get(t, "/v1/history", ""); code != http.StatusUnauthorized {
		t.Fatalf("/v1/history without a token: %d, want 401", code)
	}
	if code, _ := ra.get(t, "/v1/history", "wrong"); code != http.StatusUnauthorized {
		t.Fatalf("/v1/history with a wrong token: %d, want 401", code)
	}
	if code, _ := ra.get(t, "/v1/history?since=yesterday", ra.files.tokenValue); code != http.StatusBadRequest {
		t.Fatalf("/v1/history?since=yesterday: %d, want 400", code)
	}
	var h wire.History
	deadline := time.Now().Add(20 * time.Second)
	for len(h.Snapshots) < 5 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		h = ra.history(t, time.Time{})
	}
	if len(h.Snapshots) < 5 {
		t.Fatalf("history holds %d snapshots, want at least 5", len(h.Snapshots))
	}
	if h.Node != "test-node" || h.StartTime.IsZero() || h.Every != 20*time.Millisecond || h.Keep != time.Minute || h.Now.Before(h.Snapshots[len(h.Snapshots)-1].Time) {
		t.Errorf("history header: %+v", h)
	}
	for i, s := range h.Snapshots {
		if !s.StartTime.Equal(h.StartTime) || (i > 0 && (s.Seq <= h.Snapshots[i-1].Seq || !s.Time.After(h.Snapshots[i-1].Time))) {
			t.Fatalf("snapshot %d: start %s seq %d time %s after %+v", i, s.StartTime, s.Seq, s.Time, h.Snapshots[max(i-1, 0)])
		}
	}
	if _, err := health.NewWindow(h.Snapshots[0], h.Snapshots[len(h.Snapshots)-1]); err != nil {
		t.Errorf("history snapshots do not subtract: %v", err)
	}
	live := ra.snapshot(t)
	if live.Seq <= h.Snapshots[len(h.Snapshots)-1].Seq {
		t.Errorf("live snapshot seq %d not after the history's %d: one seq counter for both", live.Seq, h.Snapshots[len(h.Snapshots)-1].Seq)
	}
	mid := h.Snapshots[2].Time
	later := ra.history(t, mid)
	if len(later.Snapshots) == 0 || later.Snapshots[0].Time.Before(mid) || later.Snapshots[0].Seq != h.Snapshots[2].Seq {
		t.Errorf("since %s: first %+v, want seq %d", mid, later.Snapshots[:1], h.Snapshots[2].Seq)
	}
}

// TestHistoryStartsAtTheRestart: the counters reset when the agent
// restarts, so its history does too. A new run serves nothing from the old
// one: its first snapshot is its own start's.
func TestHistoryStartsAtTheRestart(t *testing.T) {
	fp := &fakeProbe{counters: map[bpf.Key]*bpf.Counters{{Netns: 100, Side: bpf.SideApp}: {Connects: 7}}}
	res := NewStaticResolver(map[uint32]Pod{100: {Namespace: "shop", Name: "cart-1", UID: "u1"}})
	tweak := func(c *Config) { fakeLoaded(fp)(c); c.HistoryEvery, c.HistoryKeep = 10*time.Millisecond, time.Minute }
	first := startAgent(t, ModeEBPF, res, tweak)
	time.Sleep(50 * time.Millisecond)
	old := first.history(t, time.Time{})
	second := startAgent(t, ModeEBPF, res, tweak) // the restarted agent: a new process, new counters
	h := second.history(t, time.Time{})
	if len(old.Snapshots) < 2 || len(h.Snapshots) == 0 {
		t.Fatalf("histories: old %d, new %d snapshots", len(old.Snapshots), len(h.Snapshots))
	}
	if !h.StartTime.After(old.StartTime) {
		t.Fatalf("new run's start %s not after the old run's %s", h.StartTime, old.StartTime)
	}
	for _, s := range h.Snapshots {
		if !s.StartTime.Equal(h.StartTime) || s.Time.Before(h.StartTime) {
			t.Fatalf("restarted agent serves a snapshot of start %s at %s (its own start: %s)", s.StartTime, s.Time, h.StartTime)
		}
	}
	if h.Snapshots[0].Seq != 1 {
		t.Errorf("the restarted agent's history starts at seq %d, want 1 (its first snapshot)", h.Snapshots[0].Seq)
	}
}

func TestNewRejectsBadHistory(t *testing.T) {
	files := writeTLSFiles(t)
	for _, c := range []Config{
		{HistoryEvery: time.Minute, HistoryKeep: time.Second},
		{HistoryEvery: -time.Second},
		{HistoryMaxBytes: -1},
	} {
		c.Node, c.CertFile, c.KeyFile, c.TokenFile = "n", files.cert, files.key, files.token
		if _, err := New(c); err == nil {
			t.Errorf("New(every %s, keep %s, max %d): no error", c.HistoryEvery, c.HistoryKeep, c.HistoryMaxBytes)
		}
	}
}

// history fetches /v1/history?since=.
func (ra *runningAgent) history(t testing.TB, since time.Time) wire.History {
	t.Helper()
	path := "/v1/history"
	if !since.IsZero() {
		path += "?since=" + url.QueryEscape(since.Format(time.RFC3339Nano))
	}
	code, body := ra.get(t, path, ra.files.tokenValue)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	var h wire.History
	if err := json.Unmarshal(body, &h); err != nil {
		t.Fatal(err)
	}
	return h
}
