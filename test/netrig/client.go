package netrig

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Observed is what a set of clients saw with their own eyes: the ground
// truth the agent's counts are checked against.
type Observed struct {
	// Resets counts connections that ended because a reset arrived:
	// ECONNRESET or EPIPE on a read or write, ECONNREFUSED on connect (a
	// reset answering the SYN), or ECONNRESET on connect (the handshake
	// completed and a reset followed before connect() returned).
	Resets int64
	// Refused is the ECONNREFUSED part of Resets.
	Refused int64
	// Connects counts connects whose handshake completed (including the
	// ones reset before connect() returned).
	Connects int64
	// EOFs counts connections the server closed cleanly (no reset).
	EOFs int64
	// Other counts other errors (timeouts and such).
	Other int64
}

type counters struct {
	resets, refused, connects, eofs, other atomic.Int64
}

func (c *counters) snapshot() Observed {
	return Observed{
		Resets: c.resets.Load(), Refused: c.refused.Load(), Connects: c.connects.Load(),
		EOFs: c.eofs.Load(), Other: c.other.Load(),
	}
}

func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// classifyDial records a failed connect.
func (c *counters) classifyDial(err error) {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		c.resets.Add(1)
		c.refused.Add(1)
	case isReset(err):
		// The handshake completed, then a reset arrived before connect()
		// reported back: an established connection that was reset.
		c.connects.Add(1)
		c.resets.Add(1)
	default:
		c.other.Add(1)
	}
}

// classifyEnd records how an open connection ended after err from a read or
// write. On EOF it waits until the kernel has settled whether a reset is
// still coming: a FIN may arrive before the reset that answers data we
// already sent, and a read returns the EOF first. Data still unacknowledged
// means an answer (ACK or RST) is due; once the send queue is empty or the
// socket is closed, SO_ERROR tells which.
func (c *counters) classifyEnd(conn *net.TCPConn, err error) {
	switch {
	case isReset(err):
		c.resets.Add(1)
		return
	case !errors.Is(err, io.EOF):
		c.other.Add(1)
		return
	}
	raw, rerr := conn.SyscallConn()
	if rerr != nil {
		c.other.Add(1)
		return
	}
	var soErr int
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		settled := false
		_ = raw.Control(func(fd uintptr) {
			outq, _ := unix.IoctlGetInt(int(fd), unix.SIOCOUTQ)
			info, ierr := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
			if (ierr == nil && info.State == 7 /* TCP_CLOSE */) || outq == 0 {
				settled = true
				soErr, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
			}
		})
		if settled {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	if soErr == int(unix.ECONNRESET) || soErr == int(unix.EPIPE) {
		c.resets.Add(1)
		return
	}
	c.eofs.Add(1)
}

// Load is client traffic running in one pod namespace.
type Load struct {
	c    counters
	stop chan struct{}
	wg   sync.WaitGroup
}

// LoadOptions shape a Load.
type LoadOptions struct {
	Target    string        // host:port to connect to
	Short     int           // goroutines making short request/response connections back to back
	ShortGap  time.Duration // pause between one short connection and the next
	Streams   int           // long-lived connections exchanging a message every StreamGap
	StreamGap time.Duration
}

// StartLoad starts client traffic from inside the namespace.
func (n *Netns) StartLoad(o LoadOptions) *Load {
	l := &Load{stop: make(chan struct{})}
	if o.StreamGap == 0 {
		o.StreamGap = 20 * time.Millisecond
	}
	for range o.Short {
		l.wg.Add(1)
		go l.run(n, func() { l.short(o) })
	}
	for range o.Streams {
		l.wg.Add(1)
		go l.run(n, func() { l.stream(o) })
	}
	return l
}

func (l *Load) run(n *Netns, body func()) {
	defer l.wg.Done()
	if err := n.Enter(); err != nil {
		l.c.other.Add(1)
		return
	}
	body()
}

func (l *Load) stopped() bool {
	select {
	case <-l.stop:
		return true
	default:
		return false
	}
}

func (l *Load) pause(d time.Duration) {
	if d <= 0 {
		return
	}
	select {
	case <-l.stop:
	case <-time.After(d):
	}
}

var message = []byte("nodewise-netrig-0123456789abcdef")

// exchange writes one message and reads its echo.
func exchange(conn *net.TCPConn, buf []byte) error {
	if _, err := conn.Write(message); err != nil {
		return err
	}
	_, err := io.ReadFull(conn, buf[:len(message)])
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = io.EOF
	}
	return err
}

func (l *Load) dial(target string) (*net.TCPConn, bool) {
	conn, err := net.DialTimeout("tcp4", target, 5*time.Second)
	if err != nil {
		l.c.classifyDial(err)
		return nil, false
	}
	l.c.connects.Add(1)
	return conn.(*net.TCPConn), true
}

func (l *Load) short(o LoadOptions) {
	buf := make([]byte, 256)
	for !l.stopped() {
		conn, ok := l.dial(o.Target)
		if !ok {
			l.pause(10 * time.Millisecond)
			continue
		}
		if err := exchange(conn, buf); err != nil {
			l.c.classifyEnd(conn, err)
		}
		conn.Close()
		l.pause(o.ShortGap)
	}
}

func (l *Load) stream(o LoadOptions) {
	buf := make([]byte, 256)
	for !l.stopped() {
		conn, ok := l.dial(o.Target)
		if !ok {
			l.pause(50 * time.Millisecond)
			continue
		}
		for !l.stopped() {
			if err := exchange(conn, buf); err != nil {
				l.c.classifyEnd(conn, err)
				break
			}
			l.pause(o.StreamGap)
		}
		conn.Close()
	}
}

// Stop ends the load, closes its connections and returns what it saw.
func (l *Load) Stop() Observed {
	close(l.stop)
	l.wg.Wait()
	return l.c.snapshot()
}

// Hold opens n connections from inside the namespace to target and keeps
// them open (idle) until close is called. It returns when all are
// established.
func (n *Netns) Hold(target string, count int) (closeAll func(), err error) {
	var conns []net.Conn
	err = n.Do(func() error {
		for range count {
			c, err := net.DialTimeout("tcp4", target, 5*time.Second)
			if err != nil {
				return err
			}
			conns = append(conns, c)
		}
		return nil
	})
	closeAll = func() {
		for _, c := range conns {
			c.Close()
		}
	}
	if err != nil {
		closeAll()
		return nil, err
	}
	return closeAll, nil
}
