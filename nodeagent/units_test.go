package nodeagent

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodewise/nodewise/bpf"
)

func TestParseNetStats(t *testing.T) {
	snmp := "Ip: Forwarding DefaultTTL\nIp: 1 64\nTcp: RtoAlgorithm MaxConn ActiveOpens AttemptFails EstabResets OutRsts RetransSegs\nTcp: 1 -1 10 2 3 7 4\n"
	netstat := "TcpExt: SyncookiesSent TCPAbortOnData TCPAbortOnClose TCPAbortOnTimeout\nTcpExt: 0 5 1 1\n"
	s, err := parseNetStats(snmp)
	if err != nil {
		t.Fatal(err)
	}
	n, err := parseNetStats(netstat)
	if err != nil {
		t.Fatal(err)
	}
	got := procCountsFrom(s, n)
	want := procCounts{OutRsts: 7, EstabResets: 3, AttemptFails: 2, ActiveOpens: 10, RetransSegs: 4, Aborts: 2}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if s["Tcp"]["MaxConn"] != 0 {
		t.Errorf("MaxConn -1 should read as 0")
	}
	if _, err := parseNetStats("Tcp: A B\nTcp: 1\n"); err == nil {
		t.Error("mismatched header and values accepted")
	}
	if d := (procCounts{OutRsts: 5}).delta(procCounts{OutRsts: 7}); d.OutRsts != 0 {
		t.Errorf("a counter that went backwards must clamp to 0, got %d", d.OutRsts)
	}
}

func TestPodUIDFromCgroup(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice/cri-containerd-abc.scope\n", "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901"},
		{"0::/kubepods/besteffort/pod1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901/0123abcd\n", "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901"},
		{"0::/system.slice/containerd.service\n", ""},
		{"0::/user.slice/user-0.slice/session-1.scope\n", ""},
	} {
		got, ok := podUIDFromCgroup(tc.in)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("podUIDFromCgroup(%q) = %q, %v; want %q", tc.in, got, ok, tc.want)
		}
	}
}

func TestAgeBuckets(t *testing.T) {
	for _, tc := range []struct {
		age  float64
		want int
	}{{0, 0}, {0.99, 0}, {1, 1}, {24.9, 7}, {25, 8}, {3599, 15}, {3600, 16}, {1e6, 16}} {
		if got := ageBucket(tc.age); got != tc.want {
			t.Errorf("ageBucket(%v) = %d, want %d", tc.age, got, tc.want)
		}
	}
	k := bpf.Key{Netns: 1}
	now := uint64(100e9)
	got := bucketAges([]bpf.Conn{{StartNs: now - 30e9, Key: k}, {StartNs: now - 26e9, Key: k}, {StartNs: now + 5, Key: k}}, now)
	if got[k][8] != 1 || got[k][9] != 1 || got[k][0] != 1 {
		t.Errorf("bucketAges: %v", got[k])
	}
}

// fakeProc builds a /proc tree: pid 1 (also "self") in the host namespace,
// pod processes in their own, one hostNetwork pod sharing the host's. Files
// of processes sharing a namespace are hard links, so they share an inode as
// the kernel's do.
func fakeProc(t *testing.T) (root string, podNS, podNet uint32) {
	t.Helper()
	root = t.TempDir()
	mk := func(pid int, cgroup string, from int) {
		dir := filepath.Join(root, fmt.Sprint(pid))
		for _, sub := range []string{"ns", "net"} {
			if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for _, f := range []string{"ns/net", "net/snmp"} {
			path := filepath.Join(dir, f)
			if from != 0 {
				if err := os.Link(filepath.Join(root, fmt.Sprint(from), f), path); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(path, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(cgroup), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mk(1, "0::/init.scope\n", 0)
	if err := os.Symlink(filepath.Join(root, "1"), filepath.Join(root, "self")); err != nil {
		t.Fatal(err)
	}
	mk(40, "0::/kubepods/burstable/pod11111111-2222-3333-4444-555555555555/c1\n", 0)
	mk(41, "0::/kubepods/burstable/pod11111111-2222-3333-4444-555555555555/c2\n", 40)
	mk(50, "0::/kubepods/besteffort/pod99999999-2222-3333-4444-555555555555/c\n", 1) // hostNetwork pod
	var err error
	if podNS, err = KeyNetnsInode.of(filepath.Join(root, "40")); err != nil {
		t.Fatal(err)
	}
	if podNet, err = KeyProcNet.of(filepath.Join(root, "40")); err != nil {
		t.Fatal(err)
	}
	return root, podNS, podNet
}

func TestProcResolver(t *testing.T) {
	for _, key := range []NamespaceKey{KeyNetnsInode, KeyProcNet} {
		root, podNS, podNet := fakeProc(t)
		want := podNS
		if key == KeyProcNet {
			want = podNet
		}
		now := time.Unix(1000, 0)
		r := &ProcResolver{ProcRoot: root, Key: key, Retain: time.Minute, now: func() time.Time { return now }}
		got, err := r.Pods()
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[want].UID != "11111111-2222-3333-4444-555555555555" {
			t.Fatalf("key %d: Pods() = %+v, want only the pod namespace %d (never the host's)", key, got, want)
		}
		pids, err := netnsPIDs(root, key)
		if err != nil || pids[want] != 40 || len(pids) != 2 {
			t.Errorf("key %d: netnsPIDs = %v, %v; want the pod namespace at pid 40 and the host's", key, pids, err)
		}
		// The pod's processes exit: it stays attributed for Retain, then goes.
		for _, pid := range []string{"40", "41"} {
			if err := os.RemoveAll(filepath.Join(root, pid)); err != nil {
				t.Fatal(err)
			}
		}
		now = now.Add(30 * time.Second)
		if got, _ := r.Pods(); len(got) != 1 {
			t.Errorf("key %d: within Retain: %+v", key, got)
		}
		now = now.Add(2 * time.Minute)
		if got, _ := r.Pods(); len(got) != 0 {
			t.Errorf("key %d: after Retain: %+v", key, got)
		}
	}
}
