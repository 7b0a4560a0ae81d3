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

// fakeProc builds a /proc tree: pid 1 in the host namespace, pod processes
// in their own, one hostNetwork pod sharing the host's.
func fakeProc(t *testing.T) (root string, podNS uint32) {
	t.Helper()
	root = t.TempDir()
	mk := func(pid int, cgroup string, nsFrom string) string {
		dir := filepath.Join(root, fmt.Sprint(pid))
		if err := os.MkdirAll(filepath.Join(dir, "ns"), 0o755); err != nil {
			t.Fatal(err)
		}
		ns := filepath.Join(dir, "ns", "net")
		if nsFrom != "" {
			if err := os.Link(nsFrom, ns); err != nil {
				t.Fatal(err)
			}
		} else if err := os.WriteFile(ns, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte(cgroup), 0o644); err != nil {
			t.Fatal(err)
		}
		return ns
	}
	host := mk(1, "0::/init.scope\n", "")
	pod := mk(40, "0::/kubepods/burstable/pod11111111-2222-3333-4444-555555555555/c1\n", "")
	mk(41, "0::/kubepods/burstable/pod11111111-2222-3333-4444-555555555555/c2\n", pod)
	mk(50, "0::/kubepods/besteffort/pod99999999-2222-3333-4444-555555555555/c\n", host) // hostNetwork pod
	ino, err := nsInode(pod)
	if err != nil {
		t.Fatal(err)
	}
	return root, ino
}

func TestProcResolver(t *testing.T) {
	root, podNS := fakeProc(t)
	now := time.Unix(1000, 0)
	r := &ProcResolver{ProcRoot: root, Retain: time.Minute, now: func() time.Time { return now }}
	got, err := r.Pods()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[podNS].UID != "11111111-2222-3333-4444-555555555555" {
		t.Fatalf("Pods() = %+v, want only the pod namespace %d (never the host's)", got, podNS)
	}
	// The pod's processes exit: it stays attributed for Retain, then goes.
	if err := os.RemoveAll(filepath.Join(root, "40")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(root, "41")); err != nil {
		t.Fatal(err)
	}
	now = now.Add(30 * time.Second)
	if got, _ := r.Pods(); len(got) != 1 {
		t.Errorf("within Retain: %+v", got)
	}
	now = now.Add(2 * time.Minute)
	if got, _ := r.Pods(); len(got) != 0 {
		t.Errorf("after Retain: %+v", got)
	}
}
