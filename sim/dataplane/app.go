package dataplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Traffic shapes what each client pod sends. Zero values get defaults.
type Traffic struct {
	// ShortGap is the pause between one short request and the next (default 200 ms).
	ShortGap time.Duration
	// Streams is the number of long-lived streams each client pod holds (default 2).
	Streams int
	// StreamLife is the shortest life of a stream before the client closes
	// it (lives are spread up to 1.5 times that); it should be longer than
	// the drain deadline (default 40 s).
	StreamLife time.Duration
	// StreamGap is the pause between messages on a stream (default 500 ms).
	StreamGap time.Duration
	// PreStop is how long a stopping pod keeps serving after its endpoints
	// are gone (no client picks it any more) before it handles SIGTERM, as a
	// well-behaved app's preStop hook sleeps; on SIGTERM it then answers the
	// requests in flight before closing. Negative: the app stops at once,
	// dropping what is in flight (the rig before well-behaved shutdown).
	// Default 2 s.
	PreStop time.Duration
	// AbortEvery, when set, makes one short request in AbortEvery end with
	// an abortive close (SO_LINGER 0, a reset) after its answer, as real
	// clients do when a pooled connection is dropped or a timeout fires:
	// a background of resets proportional to traffic. Under a TrafficSurge of
	// ×f the share is f/AbortEvery, because a loaded backend's timeouts
	// grow faster than its traffic: a cluster-wide surge then raises resets
	// per connection, as a node's regression would (DataPlane.TrafficSurge). 0:
	// no request aborts (the default: the rig's healthy traffic has almost
	// no resets).
	AbortEvery int
}

// WithDefaults is t with its zero values filled in.
func (t Traffic) WithDefaults() Traffic {
	t.defaults()
	return t
}

func (t *Traffic) defaults() {
	if t.ShortGap == 0 {
		t.ShortGap = 200 * time.Millisecond
	}
	if t.Streams == 0 {
		t.Streams = 2
	}
	if t.StreamLife == 0 {
		t.StreamLife = 40 * time.Second
	}
	if t.StreamGap == 0 {
		t.StreamGap = 500 * time.Millisecond
	}
	if t.PreStop == 0 {
		t.PreStop = 2 * time.Second
	}
}

var message = []byte("nodewise-dataplane-0123456789ab\n")

// app is one app pod: an echo server on AppPort and, in client pods, short
// requests and long-lived streams to other pods.
type app struct {
	netns   string
	ip      string
	traffic Traffic
	load    *load
	target  func(self string) string
	gone    func(ip string) bool // the pod at ip is stopping or gone
	truth   truthCounters

	ctx     context.Context
	cancel  context.CancelFunc
	clients sync.WaitGroup
	ln      net.Listener

	mu       sync.Mutex
	stopping bool
	conns    map[*net.TCPConn]bool // served connections → an answer is due (a request is in flight)
	handlers sync.WaitGroup
}

func startApp(netns, ip string, client bool, traffic Traffic, pace *load, target func(self string) string, gone func(ip string) bool) (*app, error) {
	if gone == nil {
		gone = func(string) bool { return false }
	}
	if pace == nil {
		pace = &load{}
	}
	a := &app{netns: netns, ip: ip, traffic: traffic, load: pace, target: target, gone: gone, conns: map[*net.TCPConn]bool{}}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	err := inNetns(netns, func() error {
		var err error
		a.ln, err = net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", AppPort))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("app server in %s: %w", netns, err)
	}
	go a.serve()
	if client {
		a.clients.Add(1 + traffic.Streams)
		go a.run(a.shortLoop)
		for range traffic.Streams {
			go a.run(a.streamLoop)
		}
	}
	return a, nil
}

func (a *app) run(body func()) {
	defer a.clients.Done()
	body()
}

func (a *app) serve() {
	for {
		c, err := a.ln.Accept()
		if err != nil {
			return
		}
		tc := c.(*net.TCPConn)
		a.mu.Lock()
		if a.stopping {
			a.mu.Unlock()
			tc.Close()
			continue
		}
		a.conns[tc] = false
		a.handlers.Add(1)
		a.mu.Unlock()
		go a.handle(tc)
	}
}

// handle echoes until the client closes. Once the pod is stopping, a
// well-behaved app (PreStop ≥ 0) answers the request in flight and then
// sends its FIN; the rig's old abrupt app only reads (and discards) until the
// client's FIN. Either way closing never resets.
func (a *app) handle(c *net.TCPConn) {
	defer a.handlers.Done()
	defer func() {
		a.mu.Lock()
		delete(a.conns, c)
		a.mu.Unlock()
		c.Close()
	}()
	buf := make([]byte, 4096)
	finished := false
	for {
		n, err := c.Read(buf)
		if err != nil {
			a.truth.rst(err)
			return
		}
		a.mu.Lock()
		stopping := a.stopping
		if !stopping {
			a.conns[c] = true // answering
		}
		a.mu.Unlock()
		if finished || stopping {
			continue // our FIN is out: nothing more can be answered
		}
		if _, err := c.Write(buf[:n]); err != nil {
			a.truth.rst(err)
			return
		}
		a.mu.Lock()
		a.conns[c] = false
		stopping = a.stopping
		a.mu.Unlock()
		if stopping {
			_ = c.CloseWrite() // the answer is out: now the FIN
			_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
			finished = true
		}
	}
}

// stop is the app's SIGTERM handling: clients close their streams with a
// FIN, the server stops accepting and sends a FIN on every connection (a
// well-behaved app first answers the request in flight on it), then waits
// (up to ctx) for the clients to close theirs.
func (a *app) stop(ctx context.Context) {
	a.cancel()
	a.ln.Close()
	a.mu.Lock()
	a.stopping = true
	for c, answering := range a.conns {
		if answering && a.traffic.PreStop >= 0 {
			continue // its handler sends the FIN after the answer
		}
		_ = c.CloseWrite()
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	}
	a.mu.Unlock()
	done := make(chan struct{})
	go func() { a.clients.Wait(); a.handlers.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

func (a *app) pause(d time.Duration) bool {
	select {
	case <-a.ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func (a *app) dial() (*net.TCPConn, string, error) {
	dst := a.target(a.ip)
	if dst == "" {
		return nil, "", errNoTarget
	}
	d := net.Dialer{Timeout: 3 * time.Second}
	var c net.Conn
	err := inNetns(a.netns, func() error {
		var err error
		c, err = d.DialContext(a.ctx, "tcp4", net.JoinHostPort(dst, fmt.Sprint(AppPort)))
		return err
	})
	if err != nil {
		return nil, dst, err
	}
	return c.(*net.TCPConn), dst, nil
}

var errNoTarget = errors.New("no other app pod to talk to")

// failed counts a request to dst that got no answer, apart when dst was
// being evicted (or gone) by then.
func (a *app) failed(dst string, err error) {
	a.truth.requestsFailed.Add(1)
	if a.gone(dst) {
		a.truth.requestsFailedEvicted.Add(1)
	}
	a.truth.rst(err)
}

func exchange(c *net.TCPConn, buf []byte) error {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write(message); err != nil {
		return err
	}
	_, err := io.ReadFull(c, buf[:len(message)])
	if errors.Is(err, io.ErrUnexpectedEOF) {
		err = io.EOF
	}
	return err
}

func (a *app) shortLoop() {
	buf := make([]byte, 64)
	for a.ctx.Err() == nil {
		c, dst, err := a.dial()
		if errors.Is(err, errNoTarget) || a.ctx.Err() != nil {
			if c != nil {
				c.Close()
			}
			a.pause(a.load.gap(a.traffic.ShortGap))
			continue
		}
		a.truth.requests.Add(1)
		if err == nil {
			err = exchange(c, buf)
			if err == nil && a.load.aborts(a.traffic.AbortEvery) {
				a.truth.aborted.Add(1)
				resetConn(c)
			} else {
				c.Close()
			}
		}
		if err != nil {
			a.failed(dst, err)
		}
		a.pause(a.load.gap(a.traffic.ShortGap))
	}
}

func (a *app) streamLoop() {
	buf := make([]byte, 64)
	for a.ctx.Err() == nil {
		c, dst, err := a.dial()
		if err != nil {
			a.truth.rst(err)
			a.pause(a.traffic.StreamGap)
			continue
		}
		// A stream counts once its first exchange succeeds; one that fails
		// to open is a failed request, not a stream reset.
		a.truth.requests.Add(1)
		if err := exchange(c, buf); err != nil {
			a.failed(dst, err)
			c.Close()
			a.pause(a.traffic.StreamGap)
			continue
		}
		a.truth.streams.Add(1)
		a.stream(c, buf)
	}
}

// stream runs one long-lived stream and records how it ended.
func (a *app) stream(c *net.TCPConn, buf []byte) {
	opened := time.Now()
	// Lives are spread over [StreamLife, 1.5 StreamLife) so streams do not
	// end in lockstep.
	end := opened.Add(a.traffic.StreamLife + time.Duration(rand.Int64N(int64(a.traffic.StreamLife)/2+1)))
	for {
		if err := exchange(c, buf); err != nil {
			switch {
			case isReset(err):
				a.truth.reset(time.Since(opened))
				c.Close()
			case errors.Is(err, io.EOF):
				a.truth.streamsGraceful.Add(1)
				c.Close()
			default:
				a.truth.streamsOther.Add(1)
				resetConn(c)
			}
			return
		}
		if time.Now().After(end) || !a.pause(a.load.gap(a.traffic.StreamGap)) {
			a.closeGracefully(c, opened)
			return
		}
	}
}

// closeGracefully sends a FIN and reads until the peer's FIN, so the close
// never turns into a reset; a reset seen meanwhile still counts as one.
func (a *app) closeGracefully(c *net.TCPConn, opened time.Time) {
	_ = c.CloseWrite()
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	_, err := io.Copy(io.Discard, c)
	c.Close()
	if isReset(err) {
		a.truth.reset(time.Since(opened))
		return
	}
	a.truth.streamsGraceful.Add(1)
}
