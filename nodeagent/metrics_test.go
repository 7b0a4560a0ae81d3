package nodeagent

import (
	"net/http"
	"strings"
	"testing"

	"github.com/nodewise/nodewise/bpf"
	"github.com/nodewise/nodewise/health/wire"
)

// TestPodHistogramsCanBeLeftOutOfMetrics counts one pod side's series on
// /metrics: 93 with the histograms (6 counters, two log2 histograms of 34
// series, the age histogram's 19), 6 without them; the snapshot the judge
// reads keeps its histograms either way.
func TestPodHistogramsCanBeLeftOutOfMetrics(t *testing.T) {
	for _, tc := range []struct {
		off  bool
		want int
	}{{false, 93}, {true, 6}} {
		c := &bpf.Counters{Connects: 7}
		c.ConnectLatency[6] = 7
		fp := &fakeProbe{counters: map[bpf.Key]*bpf.Counters{{Netns: 100, Side: bpf.SideApp}: c}}
		res := NewStaticResolver(map[uint32]Pod{100: {Namespace: "shop", Name: "cart-1", UID: "u1"}})
		ra := startAgent(t, ModeEBPF, res, func(cfg *Config) {
			fakeLoaded(fp)(cfg)
			cfg.NoPodHistograms = tc.off
		})
		code, body := ra.get(t, "/metrics", ra.files.tokenValue)
		if code != http.StatusOK {
			t.Fatalf("/metrics: %d", code)
		}
		series := 0
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, "nodewise_pod_tcp_") && strings.Contains(line, `pod="cart-1",side="app"`) {
				series++
			}
		}
		if series != tc.want {
			t.Errorf("NoPodHistograms=%v: %d series for cart-1/app on /metrics, want %d", tc.off, series, tc.want)
		}
		if !strings.Contains(string(body), `nodewise_pod_tcp_connects_total{namespace="shop",pod="cart-1",side="app"} 7`) {
			t.Errorf("NoPodHistograms=%v: /metrics lacks the connects counter", tc.off)
		}
		if app := podSide(t, ra.snapshot(t), "cart-1", wire.SideApp); app.ConnectLatency.Buckets[6] != 7 {
			t.Errorf("NoPodHistograms=%v: the snapshot lost its connect-latency histogram: %+v", tc.off, app.ConnectLatency)
		}
	}
}
