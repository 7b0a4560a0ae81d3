package bpf

import (
	"fmt"
	"testing"
	"time"

	"github.com/nodewise/nodewise/test/netrig"
)

// TestSocketTableTracksManyConnections opens many connections at once in a
// namespace of its own, so both ends of each claim a slot of the socket
// table together, and checks that every one is listed as established under
// that namespace (none lost to collisions, none overflowed), that connects,
// accepts and connect-latency samples match, and that closing them frees
// every slot.
func TestSocketTableTracksManyConnections(t *testing.T) {
	r := netrig.New(t)
	p := loadForTest(t, 0)
	pod := r.AddPod("table")
	pod.ListenEcho(t, 8080, false)
	over0, err := p.EstablishedOverflow()
	if err != nil {
		t.Fatal(err)
	}

	const n = 3000
	closeAll, err := pod.Hold(fmt.Sprintf("%s:8080", pod.IP), n)
	if err != nil {
		t.Fatalf("opening %d connections: %v", n, err)
	}
	defer closeAll()
	key := Key{Netns: pod.Inode, Side: SideApp}
	// The server's accepted sockets reach ESTABLISHED in softirq, right
	// after the client's: wait for the last ones rather than race them.
	var est int
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if est = countConns(t, p, key); est >= 2*n || time.Now().After(deadline) {
			break
		}
	}
	if est != 2*n {
		t.Errorf("established sockets in the namespace: %d, want %d (both ends of %d connections)", est, 2*n, n)
	}
	if over, _ := p.EstablishedOverflow(); over != over0 {
		t.Errorf("socket table overflowed %d times", over-over0)
	}
	cs, err := p.ReadCounters()
	if err != nil {
		t.Fatal(err)
	}
	c := cs[key]
	if c == nil {
		t.Fatalf("no counters for the namespace")
	}
	var samples uint64
	for _, v := range c.ConnectLatency {
		samples += v
	}
	if c.Connects != n || c.Accepts != n || samples != n {
		t.Errorf("connects %d, accepts %d, latency samples %d: want %d each", c.Connects, c.Accepts, samples, n)
	}

	closeAll()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if est = countConns(t, p, key); est == 0 || time.Now().After(deadline) {
			break
		}
	}
	if est != 0 {
		t.Errorf("after closing every connection %d sockets are still listed as established", est)
	}
	cs, err = p.ReadCounters()
	if err != nil {
		t.Fatal(err)
	}
	var srtt uint64
	for _, v := range cs[key].SRTT {
		srtt += v
	}
	if srtt != 2*n {
		t.Errorf("SRTT samples %d, want one per socket leaving ESTABLISHED (%d)", srtt, 2*n)
	}
}

func countConns(t *testing.T, p *Probe, key Key) int {
	t.Helper()
	conns, err := p.ReadConns()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for _, c := range conns {
		if c.Key == key {
			n++
		}
	}
	return n
}
