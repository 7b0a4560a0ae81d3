package netrig

import (
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// EchoPort is where the hub's echo server listens for wired pods.
const EchoPort = 8080

// Link is what a wired pod's link does to the SYNs that open connections
// (this kernel has no netem): the stand-in's way of adding latency to new
// connections only, or of losing their first SYN.
type Link struct {
	SYNDelay     time.Duration // hold every SYN this long before passing it on
	DropFirstSYN bool          // drop each connection's first SYN (its retransmit passes)
}

// Wire joins the pod to the hub through a user-space link (a TUN device on
// each side, relayed by this process) that treats SYNs as link says. It
// returns the address of an echo server in the hub reached over that link.
func (p *Pod) Wire(link Link) string {
	t := p.rig.t
	t.Helper()
	p.rig.startHubEcho()
	n := p.IP[3]
	podAddr, hubAddr := fmt.Sprintf("10.78.%d.2", n), fmt.Sprintf("10.78.%d.1", n)
	podTun := p.openTun("slow0")
	hubTun := p.rig.Hub.openTunT(t, fmt.Sprintf("s%d", n))
	p.rig.ip("-n", p.Name, "addr", "add", podAddr, "peer", hubAddr, "dev", "slow0")
	p.rig.ip("-n", p.Name, "link", "set", "slow0", "up")
	p.rig.ip("-n", p.rig.Hub.Name, "addr", "add", hubAddr, "peer", podAddr, "dev", fmt.Sprintf("s%d", n))
	p.rig.ip("-n", p.rig.Hub.Name, "link", "set", fmt.Sprintf("s%d", n), "up")
	go relay(podTun, hubTun, link)
	go relay(hubTun, podTun, Link{})
	t.Cleanup(func() {
		podTun.Close()
		hubTun.Close()
	})
	return fmt.Sprintf("%s:%d", hubAddr, EchoPort)
}

func (p *Pod) openTun(name string) *os.File {
	return p.Netns.openTunT(p.rig.t, name)
}

func (n *Netns) openTunT(t interface {
	Helper()
	Fatalf(string, ...any)
}, name string) *os.File {
	t.Helper()
	var f *os.File
	err := n.Do(func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("opening /dev/net/tun: %w", err)
		}
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			unix.Close(fd)
			return err
		}
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return fmt.Errorf("TUNSETIFF %s: %w", name, err)
		}
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(fd)
			return err
		}
		f = os.NewFile(uintptr(fd), name)
		return nil
	})
	if err != nil {
		t.Fatalf("creating tun %s in %s: %v", name, n.Name, err)
	}
	return f
}

// isSYN reports whether an IPv4 packet is a TCP segment opening a
// connection (SYN without ACK).
func isSYN(pkt []byte) bool {
	if len(pkt) < 20 || pkt[0]>>4 != 4 || pkt[9] != unix.IPPROTO_TCP {
		return false
	}
	ihl := int(pkt[0]&0x0f) * 4
	if len(pkt) < ihl+14 {
		return false
	}
	flags := pkt[ihl+13]
	return flags&0x02 != 0 && flags&0x10 == 0
}

// synSource identifies a connection by its SYN's source address and port.
func synSource(pkt []byte) [6]byte {
	ihl := int(pkt[0]&0x0f) * 4
	var k [6]byte
	copy(k[:4], pkt[12:16])
	copy(k[4:], pkt[ihl:ihl+2])
	return k
}

func relay(from, to *os.File, link Link) {
	var mu sync.Mutex // serialises writes from delayed SYNs and the loop
	seen := map[[6]byte]bool{}
	buf := make([]byte, 65536)
	for {
		n, err := from.Read(buf)
		if err != nil {
			return
		}
		pkt := append([]byte(nil), buf[:n]...)
		if link.DropFirstSYN && isSYN(pkt) && !seen[synSource(pkt)] {
			seen[synSource(pkt)] = true
			continue
		}
		if link.SYNDelay > 0 && isSYN(pkt) {
			time.AfterFunc(link.SYNDelay, func() {
				mu.Lock()
				defer mu.Unlock()
				_, _ = to.Write(pkt)
			})
			continue
		}
		mu.Lock()
		_, _ = to.Write(pkt)
		mu.Unlock()
	}
}

// startHubEcho starts, once, an echo server in the hub on EchoPort.
func (r *Rig) startHubEcho() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.echo != nil {
		return
	}
	var l net.Listener
	if err := r.Hub.Do(func() error {
		var err error
		l, err = net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", EchoPort))
		return err
	}); err != nil {
		r.t.Fatalf("hub echo server: %v", err)
	}
	r.echo = l
	go serveEcho(l)
	r.t.Cleanup(func() { l.Close() })
}

// LoopbackSink listens on loopback until the test ends, reading and
// discarding what each connection sends, and returns its address.
func LoopbackSink(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	return l.Addr().String()
}

// HostNoise makes resets in the process's own (host) namespace on loopback
// until stop is called, which returns how many resets it provoked.
func HostNoise() (stop func() int64) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return func() int64 { return 0 }
	}
	closed := l.Addr().String()
	l.Close() // nobody listens there now: every connect is answered by a reset
	done := make(chan struct{})
	var wg sync.WaitGroup
	var count int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if c, err := net.Dial("tcp4", closed); err == nil {
				c.Close()
			} else {
				count++
			}
		}
	}()
	return func() int64 {
		close(done)
		wg.Wait()
		return count
	}
}
