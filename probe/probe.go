// Package probe is the nodewise probe: one per node (DaemonSet
// nodewise-probe, deploy/probe), in an ambient-enrolled namespace, so its
// traffic crosses the node's ztunnel both ways. It exchanges short requests
// with the probes on other nodes (one TCP connection each, so every request
// is a connect, an accept and a close the node agent counts) and holds a few
// long-lived streams. Drain leaves it in place (DaemonSet pods are not
// evicted), so a drained node still has traffic to judge before the
// uncordon. The judge treats its pods apart (health.Config.ProbeNamespace).
package probe

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Config configures a Probe. New fills the zero fields with defaults.
type Config struct {
	// Listen is the TCP address served to other probes (default :15080).
	Listen string
	// Peers returns the other probes' addresses (host:port). It is called
	// every PeersEvery; the probe's own address may be among them (Self).
	Peers func(ctx context.Context) ([]string, error)
	// Self is this probe's own address, left out of the peers (its pod IP and port).
	Self string
	// Rate is the short requests a second this probe makes, spread over the
	// peers in turn (default 20). Each accepts about as many.
	Rate float64
	// Streams is the long-lived connections held open (default 4), each to a
	// peer in turn, exchanging a line every StreamEvery (default 5 s). A
	// stream that breaks is counted and dialled again.
	Streams     int
	StreamEvery time.Duration
	// Timeout bounds each dial and each exchange (default 2 s).
	Timeout    time.Duration
	PeersEvery time.Duration // default 30 s
	// Dial opens the connections to the peers (default a net.Dialer with
	// Timeout). A test rig that runs probes in network namespaces of its
	// own dials from there.
	Dial   func(ctx context.Context, network, address string) (net.Conn, error)
	Logger *zap.Logger
}

// Stats are the probe's counters since it started.
type Stats struct {
	Requests, RequestFailures uint64 // short requests made, and those that failed
	Served                    uint64 // requests and stream lines answered
	StreamLines               uint64 // stream exchanges that succeeded
	StreamBreaks              uint64 // streams that failed and were dialled again
}

// Probe runs the requests and streams and serves other probes.
type Probe struct {
	cfg Config
	ln  net.Listener

	mu    sync.Mutex
	peers []string

	requests, requestFailures, served, streamLines, streamBreaks atomic.Uint64
	next                                                         atomic.Uint64
}

// New validates cfg, fills its defaults and opens the listener.
func New(cfg Config) (*Probe, error) {
	if cfg.Peers == nil {
		return nil, errors.New("probe.Config.Peers is required (for example DNSPeers of the headless Service)")
	}
	if cfg.Listen == "" {
		cfg.Listen = ":15080"
	}
	if cfg.Rate == 0 {
		cfg.Rate = 20
	}
	if cfg.Streams == 0 {
		cfg.Streams = 4
	}
	if cfg.StreamEvery == 0 {
		cfg.StreamEvery = 5 * time.Second
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.PeersEvery == 0 {
		cfg.PeersEvery = 30 * time.Second
	}
	switch {
	case cfg.Rate < 0 || cfg.Rate > 1000:
		return nil, fmt.Errorf("probe rate %g: must be in (0, 1000] requests a second", cfg.Rate)
	case cfg.Streams < 0 || cfg.Streams > 100:
		return nil, fmt.Errorf("probe streams %d: must be in [0, 100]", cfg.Streams)
	case cfg.StreamEvery < 0 || cfg.Timeout < 0 || cfg.PeersEvery < 0:
		return nil, errors.New("probe durations must be positive")
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Dial == nil {
		d := &net.Dialer{Timeout: cfg.Timeout}
		cfg.Dial = d.DialContext
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("probe: listening on %s: %w", cfg.Listen, err)
	}
	return &Probe{cfg: cfg, ln: ln}, nil
}

// Addr is the address the probe serves on.
func (p *Probe) Addr() net.Addr { return p.ln.Addr() }

// Stats returns the counters so far.
func (p *Probe) Stats() Stats {
	return Stats{Requests: p.requests.Load(), RequestFailures: p.requestFailures.Load(), Served: p.served.Load(),
		StreamLines: p.streamLines.Load(), StreamBreaks: p.streamBreaks.Load()}
}

// Run serves, sends requests and holds streams until ctx ends.
func (p *Probe) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	go func() { <-ctx.Done(); p.ln.Close() }()
	p.refreshPeers(ctx)
	wg.Add(2 + p.cfg.Streams)
	go func() { defer wg.Done(); p.serve(ctx, &wg) }()
	go func() { defer wg.Done(); p.requestLoop(ctx) }()
	for i := range p.cfg.Streams {
		go func() { defer wg.Done(); p.stream(ctx, i) }()
	}
	wg.Wait()
	return nil
}

// The protocol is one line each way: "ping\n" answered by "pong\n". A short
// request is one exchange on its own connection; a stream repeats it.
const (
	ping = "ping\n"
	pong = "pong\n"
)

func (p *Probe) serve(ctx context.Context, wg *sync.WaitGroup) {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if ctx.Err() == nil {
				p.cfg.Logger.Info("accept failed", zap.Error(err))
				time.Sleep(100 * time.Millisecond)
				continue
			}
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.answer(ctx, c)
		}()
	}
}

// answer replies to every line until the peer closes, the connection idles
// for longer than three stream periods, or ctx ends.
func (p *Probe) answer(ctx context.Context, c net.Conn) {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	r := bufio.NewReader(c)
	for {
		_ = c.SetDeadline(time.Now().Add(3*p.cfg.StreamEvery + p.cfg.Timeout))
		line, err := r.ReadString('\n')
		if err != nil || line != ping {
			return
		}
		if _, err := c.Write([]byte(pong)); err != nil {
			return
		}
		p.served.Add(1)
	}
}

// peer picks the next peer in turn for a short request.
func (p *Probe) peer() (string, bool) { return p.peerAt(p.next.Add(1)) }

// peerAt is peer n, modulo the peers: stream i's k-th dial goes to peer
// i+k, so the streams spread over the peers whatever the requests do.
func (p *Probe) peerAt(n uint64) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.peers) == 0 {
		return "", false
	}
	return p.peers[n%uint64(len(p.peers))], true
}

func (p *Probe) refreshPeers(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	all, err := p.cfg.Peers(ctx)
	if err != nil {
		p.cfg.Logger.Info("cannot list the other probes", zap.Error(err))
		return
	}
	var peers []string
	for _, a := range all {
		if a != p.cfg.Self {
			peers = append(peers, a)
		}
	}
	sort.Strings(peers)
	p.mu.Lock()
	p.peers = peers
	p.mu.Unlock()
}

func (p *Probe) requestLoop(ctx context.Context) {
	var inFlight sync.WaitGroup
	defer inFlight.Wait()
	refresh := time.NewTicker(p.cfg.PeersEvery)
	defer refresh.Stop()
	tick := time.NewTicker(time.Duration(float64(time.Second) / p.cfg.Rate))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-refresh.C:
			p.refreshPeers(ctx)
		case <-tick.C:
			addr, ok := p.peer()
			if !ok {
				continue
			}
			inFlight.Add(1)
			go func() {
				defer inFlight.Done()
				p.requests.Add(1)
				if err := p.exchangeOnce(ctx, addr); err != nil {
					p.requestFailures.Add(1)
					p.cfg.Logger.Debug("request failed", zap.String("peer", addr), zap.Error(err))
				}
			}()
		}
	}
}

// dial opens a connection to a peer within Timeout.
func (p *Probe) dial(ctx context.Context, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	return p.cfg.Dial(ctx, "tcp", addr)
}

// exchangeOnce is one short request: dial, ping, pong, close.
func (p *Probe) exchangeOnce(ctx context.Context, addr string) error {
	c, err := p.dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	return exchange(c, bufio.NewReader(c), p.cfg.Timeout)
}

func exchange(c net.Conn, r *bufio.Reader, timeout time.Duration) error {
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte(ping)); err != nil {
		return fmt.Errorf("writing: %w", err)
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return fmt.Errorf("reading: %w", err)
	}
	if line != pong {
		return fmt.Errorf("unexpected answer %q", line)
	}
	return nil
}

// stream holds one long-lived connection, exchanging a line every
// StreamEvery, and dials again (after a pause) when it breaks.
func (p *Probe) stream(ctx context.Context, i int) {
	k := uint64(i)
	for ctx.Err() == nil {
		addr, ok := p.peerAt(k)
		if !ok {
			sleep(ctx, p.cfg.StreamEvery)
			continue
		}
		k++
		err := p.holdStream(ctx, addr)
		if ctx.Err() != nil {
			return
		}
		p.streamBreaks.Add(1)
		p.cfg.Logger.Debug("stream broke", zap.Int("stream", i), zap.String("peer", addr), zap.Error(err))
		sleep(ctx, p.cfg.StreamEvery)
	}
}

func (p *Probe) holdStream(ctx context.Context, addr string) error {
	c, err := p.dial(ctx, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	r := bufio.NewReader(c)
	t := time.NewTicker(p.cfg.StreamEvery)
	defer t.Stop()
	for {
		if err := exchange(c, r, p.cfg.Timeout); err != nil {
			return err
		}
		p.streamLines.Add(1)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// DNSPeers lists the probes behind a headless Service: every address the
// name resolves to, on port.
func DNSPeers(name string, port int) func(ctx context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		ips, err := net.DefaultResolver.LookupHost(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("resolving the probes' Service %s: %w", name, err)
		}
		out := make([]string, 0, len(ips))
		for _, ip := range ips {
			out = append(out, net.JoinHostPort(ip, fmt.Sprint(port)))
		}
		return out, nil
	}
}
