package nodeagent

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/nodewise/nodewise/bpf"
	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/test/netrig"
)

// rigPods builds the rig's pods and a resolver that knows exactly them (the
// host namespace is deliberately absent).
func rigPods(r *netrig.Rig, names ...string) (map[string]*netrig.Pod, *StaticResolver) {
	pods := map[string]*netrig.Pod{}
	res := NewStaticResolver(nil)
	for _, n := range names {
		p := r.AddPod(n)
		pods[n] = p
		res.Set(p.Inode, Pod{Namespace: "rig", Name: n, UID: p.Name})
	}
	return pods, res
}

// hostNetns is the test process's own namespace, read from a thread that
// never entered a pod (the thread-group leader may have).
func hostNetns(t testing.TB) uint32 {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ino, err := nsInode("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	return ino
}

// TestKillStandinResetsAttributedPerPod is the ztunnel-swap scenario: steady
// short connections and long streams run through the in-pod stand-in of
// three pods, two stand-ins are killed with SIGKILL, and every pod's resets
// must equal what its own clients saw. An idle control pod must stay at
// zero, and resets made in the host namespace must not reach any pod.
func TestKillStandinResetsAttributedPerPod(t *testing.T) {
	r := netrig.New(t)
	pods, res := rigPods(r, "killed-a", "killed-b", "survivor", "idle")
	for _, p := range pods {
		p.StartStandin()
	}
	ra := startAgent(t, ModeEBPF, res, nil)
	if ra.Agent.src.mode() != wire.ModeEBPF {
		t.Fatalf("mode %s, want ebpf", ra.Agent.src.mode())
	}

	stopNoise := netrig.HostNoise()
	loads := map[string]*netrig.Load{}
	for _, n := range []string{"killed-a", "killed-b", "survivor"} {
		loads[n] = pods[n].StartLoad(netrig.LoadOptions{
			Target:   fmt.Sprintf("%s:15001", pods[n].IP),
			Short:    2,
			ShortGap: 5 * time.Millisecond,
			Streams:  6,
		})
	}
	time.Sleep(1500 * time.Millisecond) // steady traffic before the swap
	pods["killed-a"].KillStandin()
	pods["killed-b"].KillStandin()
	time.Sleep(500 * time.Millisecond) // clients run into the dead listener
	observed := map[string]netrig.Observed{}
	for n, l := range loads {
		observed[n] = l.Stop()
	}
	noise := stopNoise()
	time.Sleep(200 * time.Millisecond) // let the last segments land

	s := ra.snapshot(t)
	if s.Mode != wire.ModeEBPF || s.Node != "test-node" || s.AgentVersion != "test" || s.Time.Before(s.StartTime) {
		t.Errorf("snapshot header: mode=%s node=%s version=%s time=%v start=%v", s.Mode, s.Node, s.AgentVersion, s.Time, s.StartTime)
	}
	for _, n := range []string{"killed-a", "killed-b", "survivor"} {
		o := observed[n]
		app, proxy := podSide(t, s, n, wire.SideApp), podSide(t, s, n, wire.SideProxy)
		t.Logf("%s observed %+v", n, o)
		t.Logf("  %s", describe(app))
		t.Logf("  %s", describe(proxy))
		if uint64(o.Resets) != app.ResetsReceived {
			t.Errorf("%s: agent counts %d resets received by the app, its clients saw %d", n, app.ResetsReceived, o.Resets)
		}
		if uint64(o.Connects) != app.Connects {
			t.Errorf("%s: agent counts %d connects, the clients made %d", n, app.Connects, o.Connects)
		}
		if uint64(o.Refused) != app.ConnectFailures[wire.ConnectRefused] {
			t.Errorf("%s: agent counts %d refused connects, the clients saw %d", n, app.ConnectFailures[wire.ConnectRefused], o.Refused)
		}
		// A handshake the kill cuts between the SYN-ACK and the client's
		// ACK is a connect for the client but never an accept for the dead
		// listener; the client's ACK then draws a reset it sees.
		if cut := int64(o.Connects) - int64(proxy.Accepts); cut < 0 || cut > o.Resets-o.Refused || (n == "survivor" && cut != 0) {
			t.Errorf("%s: the stand-in's side accepted %d connections, the clients made %d (%d resets on established connections)",
				n, proxy.Accepts, o.Connects, o.Resets-o.Refused)
		}
		if o.Connects < 50 {
			t.Errorf("%s: only %d connects: the load did not run", n, o.Connects)
		}
	}
	for _, n := range []string{"killed-a", "killed-b"} {
		if observed[n].Resets == 0 || observed[n].Refused == 0 {
			t.Errorf("%s: the clients saw no resets (%+v): the kill did not bite", n, observed[n])
		}
		// Every reset the clients got came from the killed proxy's sockets
		// or from the proxy port nobody listened on any more.
		if proxy := podSide(t, s, n, wire.SideProxy); proxy.ResetsSent < uint64(observed[n].Resets) {
			t.Errorf("%s: proxy side sent %d resets, fewer than the %d the clients received", n, proxy.ResetsSent, observed[n].Resets)
		}
	}
	if observed["survivor"].Resets != 0 {
		t.Errorf("survivor's clients saw %d resets with the stand-in alive", observed["survivor"].Resets)
	}
	for _, side := range []wire.Side{wire.SideApp, wire.SideProxy} {
		idle := podSide(t, s, "idle", side)
		if idle.ResetsSent+idle.ResetsReceived+idle.Connects+idle.Retransmits+sum(idle.ConnectLatency.Buckets)+sum(idle.ConnAges) != 0 || len(idle.ConnectFailures) != 0 {
			t.Errorf("idle control pod is not zero: %s", describe(idle))
		}
	}

	// The host namespace's noise was counted by the kernel programs but is
	// in no pod.
	if noise == 0 {
		t.Fatal("host noise made no resets")
	}
	raw, err := ra.Agent.src.read()
	if err != nil {
		t.Fatal(err)
	}
	host := raw.counters[bpf.Key{Netns: hostNetns(t), Side: bpf.SideApp}]
	if host == nil || host.ResetsReceived < uint64(noise) {
		t.Errorf("host namespace counters %+v: want at least the %d noise resets", host, noise)
	}
	// Every reset an app side received is one its clients saw: none of the
	// host's noise was attributed to a pod. A dying stand-in's own sockets
	// may draw a reset or two (its FIN reaches a client connection the
	// client's kernel has already forgotten), at most one per connection the
	// kill cut; a live stand-in's never do.
	var appsReceived, clientsSaw uint64
	for _, p := range s.Pods {
		if p.Side == wire.SideApp {
			appsReceived += p.ResetsReceived
		}
	}
	for _, o := range observed {
		clientsSaw += uint64(o.Resets)
	}
	if appsReceived != clientsSaw {
		t.Errorf("resets received across all pods' apps %d, clients saw %d: something else was attributed", appsReceived, clientsSaw)
	}
	for n, o := range observed {
		if got := podSide(t, s, n, wire.SideProxy).ResetsReceived; got > uint64(o.Resets) || (n == "survivor" && got != 0) {
			t.Errorf("%s: the stand-in's side received %d resets (its clients saw %d)", n, got, o.Resets)
		}
	}
	t.Logf("host noise: %d resets, none attributed", noise)
}
