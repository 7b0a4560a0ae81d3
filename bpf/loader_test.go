package bpf

import (
	"net"
	"runtime"
	"testing"

	"github.com/nodewise/nodewise/test/testkit"
)

// TestLoadCountsLoopbackRefusal loads the programs and checks that a refused
// connect on loopback shows up as a reset sent, a reset received and a
// refused connect in this process's network namespace.
func TestLoadCountsLoopbackRefusal(t *testing.T) {
	testkit.RequireRoot(t, "load eBPF")
	testkit.RequireBTF(t)
	p, err := Load()
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	defer p.Close()
	// The namespace is this thread's: the connects below come from it.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var ino uint32
	if st, err := netnsInode(); err == nil {
		ino = st
	} else {
		t.Fatal(err)
	}
	// A port nobody listens on: bind one, close it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	const n = 7
	for range n {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			t.Fatalf("connect to closed port %s succeeded", addr)
		}
	}
	cs, err := p.ReadCounters()
	if err != nil {
		t.Fatal(err)
	}
	c := cs[Key{Netns: ino, Side: SideApp}]
	if c == nil {
		t.Fatalf("no counters for netns %d: %v", ino, cs)
	}
	// Other processes share this namespace: at least ours must be there.
	if c.ResetsSent < n || c.ResetsReceived < n || c.ConnectFailures[FailRefused] < n {
		t.Errorf("counters %+v: want at least %d resets sent, received and refused connects", *c, n)
	}
}
