package nodeagent

import (
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/test/netrig"
	"github.com/nodewise/nodewise/test/testkit"
)

// cgroup2Root finds a cgroup v2 mount: /sys/fs/cgroup on unified hosts,
// /sys/fs/cgroup/unified on hybrid ones.
func cgroup2Root(t *testing.T) string {
	for _, p := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
		if _, err := os.Stat(p + "/cgroup.procs"); err == nil {
			if _, err := os.Stat(p + "/cgroup.controllers"); err == nil {
				return p
			}
		}
	}
	testkit.Unavailable(t, "no cgroup v2 mount found under /sys/fs/cgroup")
	return ""
}

// TestDefaultResolverAttributesByPodCgroup runs the agent with its default
// resolver: the eBPF programs see an app process in a kubelet-shaped pod
// cgroup listen inside the pod namespace, and the agent names the
// namespace by that pod's UID. The test's
// own threads also connect inside that namespace from a non-pod cgroup:
// such visitors must not confuse attribution, and the host namespace must
// stay unattributed.
func TestDefaultResolverAttributesByPodCgroup(t *testing.T) {
	root := cgroup2Root(t)
	r := netrig.New(t)
	const uid = "0a1b2c3d-0000-4000-8000-00000000c0de"
	pod := r.AddPod("cgroup-pod")
	other := r.AddPod("unowned") // traffic but no pod cgroup: must not be attributed
	ra := startAgent(t, ModeEBPF, nil, func(c *Config) { c.CgroupRoot = root; c.ProcRoot = t.TempDir() + "/noproc" })
	pod.StartApp(r.PodCgroup(root, uid)) // the app listens from the pod's cgroup
	pod.StartStandin()                   // ztunnel's sockets: never evidence of ownership
	other.StartStandin()
	for _, p := range []*netrig.Pod{pod, other} {
		l := p.StartLoad(netrig.LoadOptions{Target: fmt.Sprintf("%s:15001", p.IP), Short: 1, ShortGap: 10 * time.Millisecond})
		time.Sleep(300 * time.Millisecond)
		if o := l.Stop(); o.Connects == 0 {
			t.Fatalf("no traffic in %s: %+v", p.Name, o)
		}
	}
	// Host-namespace traffic from this (non-pod) process.
	if c, err := net.Dial("tcp4", "127.0.0.1:1"); err == nil {
		c.Close()
	}

	s := ra.snapshot(t)
	// The agent sees the whole host: pods of a real kubelet another test
	// package runs at the same time are attributed too, rightly. Only
	// entries that no pod cgroup of this host names count here.
	var ours []wire.PodCounters
	for _, p := range s.Pods {
		if p.UID == uid || !hostPodCgroup(root, p.UID) {
			ours = append(ours, p)
		}
	}
	if len(ours) != 2 {
		t.Fatalf("want exactly the cgroup pod's two sides, got %d entries: %+v", len(ours), ours)
	}
	app := podSide(t, s, uid, wire.SideApp)
	if app.UID != uid || app.Connects == 0 {
		t.Errorf("pod attributed by cgroup: %s (uid %q)", describe(app), app.UID)
	}
}

// hostPodCgroup reports whether a kubelet's pod cgroup named for uid exists
// under root (cgroupfs "pod<uid>" or systemd "pod<uid_with_underscores>").
func hostPodCgroup(root, uid string) bool {
	if uid == "" {
		return false
	}
	names := map[string]bool{"pod" + uid: true, "pod" + strings.ReplaceAll(uid, "-", "_") + ".slice": true}
	found := false
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || found {
			return filepath.SkipDir
		}
		if d.IsDir() && names[d.Name()] {
			found = true
			return filepath.SkipAll
		}
		if !d.IsDir() {
			return nil
		}
		if strings.Count(strings.TrimPrefix(path, root), "/") > 6 {
			return filepath.SkipDir
		}
		return nil
	})
	return found
}

// TestProcModeDefaultResolverFindsPodByCgroup runs proc mode with its
// default resolver: the pod's app process sits in a kubelet-shaped cgroup,
// its namespace is told apart by /proc/<pid>/net/snmp (no ptrace rights
// needed), and its counters land on the pod's UID.
func TestProcModeDefaultResolverFindsPodByCgroup(t *testing.T) {
	const uid = "0a1b2c3d-0000-4000-8000-0000000f411b"
	s, o := earlyAppUnderLoad(t, ModeProc, uid, nil)
	if s.Mode != wire.ModeProc {
		t.Fatalf("mode %q", s.Mode)
	}
	app := podSide(t, s, uid, wire.SideApp)
	if app.UID != uid || app.Connects != uint64(o.Connects) || app.Accepts != uint64(o.Connects) || o.Connects == 0 {
		t.Errorf("proc mode, pod found by cgroup: %s; clients made %d connects", describe(app), o.Connects)
	}
}

// TestDefaultResolverAttributesServerStartedBeforeAgent: the app listened
// before the agent started, so the programs never see it listen; the
// sockets it accepts carry its cgroup (the kernel copies the listener's),
// and the agent attributes the namespace from them, though the clients
// are this test's threads in a non-pod cgroup.
func TestDefaultResolverAttributesServerStartedBeforeAgent(t *testing.T) {
	const uid = "0a1b2c3d-0000-4000-8000-0000000ea71e"
	s, o := earlyAppUnderLoad(t, ModeEBPF, uid, func(c *Config) { c.ProcRoot = t.TempDir() + "/noproc" })
	if o.Connects == 0 {
		t.Fatalf("no traffic: %+v", o)
	}
	app := podSide(t, s, uid, wire.SideApp)
	if app.UID != uid || app.Accepts == 0 {
		t.Errorf("pod attributed from accepted sockets: %s (uid %q); clients made %d connects", describe(app), app.UID, o.Connects)
	}
}

// earlyAppUnderLoad starts an app in a kubelet-shaped cgroup of pod uid,
// then the agent (its cgroup root the real one), then 300 ms of short
// connections to the app from this test's threads, and returns the
// agent's snapshot and what the clients saw.
func earlyAppUnderLoad(t *testing.T, mode, uid string, tweak func(*Config)) (wire.Snapshot, netrig.Observed) {
	t.Helper()
	root := cgroup2Root(t)
	r := netrig.New(t)
	pod := r.AddPod("early-app")
	pod.StartApp(r.PodCgroup(root, uid))
	ra := startAgent(t, mode, nil, func(c *Config) {
		c.CgroupRoot = root
		if tweak != nil {
			tweak(c)
		}
	})
	l := pod.StartLoad(netrig.LoadOptions{Target: fmt.Sprintf("%s:%d", pod.IP, netrig.AppPort), Short: 1, ShortGap: 10 * time.Millisecond})
	time.Sleep(300 * time.Millisecond)
	o := l.Stop()
	return ra.snapshot(t), o
}
