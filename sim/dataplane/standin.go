package dataplane

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// StandinEnv is the variable that, set to 1, tells a process started by the data plane to run as
// the ztunnel stand-in (see RunStandin).
const StandinEnv = "NODEWISE_ZTUNNEL_STANDIN"

// Environment the stand-in reads: the grace period, as ztunnel's chart passes
// it, and the image tag that selects its behaviour profile.
const (
	graceEnv = "TERMINATION_GRACE_PERIOD_SECONDS"
	tagEnv   = "NODEWISE_ZTUNNEL_TAG"
)

// DrainDeadline is how long ztunnel keeps established connections after
// SIGTERM: the grace period minus 5 s when it is over 10 s, minus 1 s
// otherwise, and 5 s when the grace period is unknown.
func DrainDeadline(grace time.Duration, known bool) time.Duration {
	switch {
	case !known:
		return 5 * time.Second
	case grace > 10*time.Second:
		return grace - 5*time.Second
	default:
		return max(grace-time.Second, 0)
	}
}

// Profile is a build's behaviour, chosen by its image tag.
type Profile struct {
	// Latency is added before each proxied connection is opened (-slow).
	Latency time.Duration
	// SynDropEvery > 0 drops one in that many of the SYNs the stand-in's
	// own sockets send from a pod's namespace (-slow), so those connects
	// wait for TCP's SYN retransmission (1 s or more). The sleep of Latency
	// happens in user space, before a connect, where the node agents'
	// connect latency (SYN to ESTABLISHED) cannot see it; the lost SYNs are
	// connect latency they see, as a build that loses packets would cause.
	SynDropEvery int
	// ResetShare of accepted connections are reset at once (-rst).
	ResetShare float64
	// NoHBONEFirst leaves the first pod it is handed without its HBONE
	// listener (-nolisten), while answering ok: the pod keeps 15001 and
	// 15006, so its traffic in the simulation (plaintext between pods) does
	// not change, and only the enrollment check sees the pod half out of
	// the mesh.
	NoHBONEFirst bool
}

// ProfileFor returns the behaviour of an image tag: a tag ending in -slow
// adds 50 ms per connection and makes a quarter of its connects wait for a
// SYN retransmission; one ending in -rst resets a quarter of them; one
// ending in -nolisten opens no HBONE listener in the first pod it serves.
func ProfileFor(tag string) Profile {
	switch {
	case strings.HasSuffix(tag, "-slow"):
		return Profile{Latency: 50 * time.Millisecond, SynDropEvery: 4}
	case strings.HasSuffix(tag, "-rst"):
		return Profile{ResetShare: 0.25}
	case strings.HasSuffix(tag, "-nolisten"):
		return Profile{NoHBONEFirst: true}
	}
	return Profile{}
}

// RunStandin runs the ztunnel stand-in until it has drained after SIGTERM or
// its parent goes away (stdin closes). The parent drives it over stdin with
// "add <netns>", "del <netns>" and "has <netns>" lines and reads "ok <netns>" or
// "err <netns> <message>" back on stdout.
func RunStandin() error {
	grace, err := strconv.Atoi(os.Getenv(graceEnv))
	deadline := DrainDeadline(time.Duration(grace)*time.Second, err == nil)
	s := &standin{profile: ProfileFor(os.Getenv(tagEnv)), listeners: map[string][]net.Listener{}, relays: map[*relay]bool{}, idle: make(chan struct{}, 1)}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	gone := make(chan struct{})
	go func() {
		s.serveControl(os.Stdin, os.Stdout)
		close(gone)
	}()
	fmt.Println("ready")
	select {
	case <-gone:
		return nil
	case <-term:
	}
	s.drain(deadline, gone)
	return nil
}

type standin struct {
	profile Profile

	mu        sync.Mutex
	draining  bool
	listeners map[string][]net.Listener
	skipped   bool // NoHBONEFirst: the pod it left out is chosen
	relays    map[*relay]bool
	idle      chan struct{} // poked when the last relay ends
}

func (s *standin) serveControl(in io.Reader, out io.Writer) {
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		verb, ns, _ := strings.Cut(sc.Text(), " ")
		var err error
		switch verb {
		case "add":
			err = s.add(ns)
		case "del":
			s.del(ns)
		case "has":
			err = s.has(ns)
		default:
			err = fmt.Errorf("unknown command %q", verb)
		}
		if err != nil {
			fmt.Fprintf(out, "err %s %v\n", ns, err)
			continue
		}
		fmt.Fprintf(out, "ok %s\n", ns)
	}
}

// add opens the outbound, inbound and HBONE listeners inside a pod's namespace.
func (s *standin) add(ns string) error {
	s.mu.Lock()
	draining := s.draining
	s.mu.Unlock()
	if draining {
		return fmt.Errorf("draining")
	}
	ports := []int{OutboundPort, InboundPort, HBONEPort}
	s.mu.Lock()
	if s.profile.NoHBONEFirst && !s.skipped {
		s.skipped = true
		ports = ports[:2]
		logf("-nolisten: no HBONE listener in %s", ns)
	}
	s.mu.Unlock()
	var ls []net.Listener
	for _, port := range ports {
		l, err := listenIn(ns, port)
		if err != nil {
			for _, l := range ls {
				l.Close()
			}
			return err
		}
		ls = append(ls, l)
		go s.accept(ns, l)
	}
	if err := s.dropSyns(ns); err != nil {
		for _, l := range ls {
			l.Close()
		}
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		// The drain began while these were opening: it has closed every
		// listener it knew, so these must not outlive it (a connection they
		// accepted would be reset at the deadline, however young).
		for _, l := range ls {
			l.Close()
		}
		return fmt.Errorf("draining")
	}
	s.listeners[ns] = append(s.listeners[ns], ls...)
	return nil
}

// synDropTable is the nftables table of a SynDropEvery profile in a pod's namespace.
const synDropTable = "nodewise_slow"

// dropSyns installs the SynDropEvery rule in a pod's namespace (replacing
// one a stand-in of the same build left there).
func (s *standin) dropSyns(ns string) error {
	n := s.profile.SynDropEvery
	if n <= 0 {
		return nil
	}
	rules := fmt.Sprintf(`table ip %[1]s {}
flush table ip %[1]s
table ip %[1]s {
	chain out {
		type filter hook output priority -200; policy accept;
		meta mark %[2]d tcp flags & (syn | ack) == syn numgen inc mod %[3]d 0 drop
	}
}
`, synDropTable, ZtunnelMark, n)
	return run(rules, "ip", "netns", "exec", ns, "nft", "-f", "-")
}

// undropSyns removes the SynDropEvery rule from a pod's namespace.
func (s *standin) undropSyns(ns string) {
	if s.profile.SynDropEvery > 0 {
		_ = run("", "ip", "netns", "exec", ns, "nft", "delete", "table", "ip", synDropTable)
	}
}

// has answers whether the stand-in listens in a pod's namespace.
func (s *standin) has(ns string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.listeners[ns]) == 0 {
		return fmt.Errorf("not listening")
	}
	return nil
}

func (s *standin) del(ns string) {
	s.mu.Lock()
	ls := s.listeners[ns]
	delete(s.listeners, ns)
	s.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
	s.undropSyns(ns)
}

func (s *standin) accept(ns string, l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go s.proxy(ns, c.(*net.TCPConn))
	}
}

// proxy relays one redirected connection to where it was headed, dialled
// from the same pod namespace with the ztunnel mark.
func (s *standin) proxy(ns string, down *net.TCPConn) {
	if s.profile.ResetShare > 0 && rand.Float64() < s.profile.ResetShare {
		resetConn(down)
		return
	}
	dst, err := originalDst(down)
	if err != nil {
		resetConn(down)
		return
	}
	time.Sleep(s.profile.Latency)
	up, err := dialIn(ns, dst)
	if err != nil {
		resetConn(down)
		return
	}
	r := &relay{down: down, up: up}
	s.mu.Lock()
	s.relays[r] = true
	s.mu.Unlock()
	r.run()
	s.mu.Lock()
	delete(s.relays, r)
	last := s.draining && len(s.relays) == 0
	s.mu.Unlock()
	if last {
		select {
		case s.idle <- struct{}{}:
		default:
		}
	}
}

// drain closes every listener, keeps established connections until the
// deadline (or until none is left), then resets the rest.
func (s *standin) drain(deadline time.Duration, gone <-chan struct{}) {
	s.mu.Lock()
	s.draining = true
	var served []string
	for ns, ls := range s.listeners {
		for _, l := range ls {
			l.Close()
		}
		delete(s.listeners, ns)
		served = append(served, ns)
	}
	left := len(s.relays)
	s.mu.Unlock()
	for _, ns := range served {
		s.undropSyns(ns) // the next build's connects are its own
	}
	logf("SIGTERM: listeners closed, %d connections kept until the drain deadline %s", left, deadline)
	if left > 0 {
		select {
		case <-s.idle:
			logf("drained: no connection left")
		case <-gone:
			logf("parent gone")
		case <-time.After(deadline):
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.relays) > 0 {
		logf("drain deadline: resetting %d connections", len(s.relays))
	}
	for r := range s.relays {
		r.reset()
	}
}

// relay copies bytes both ways. A FIN is passed on as a FIN; a reset or
// error on either side resets both.
type relay struct {
	down, up *net.TCPConn
}

func (r *relay) run() {
	var wg sync.WaitGroup
	wg.Add(2)
	half := func(dst, src *net.TCPConn) {
		defer wg.Done()
		if _, err := io.Copy(dst, src); err != nil {
			r.reset()
			return
		}
		_ = dst.CloseWrite()
	}
	go half(r.up, r.down)
	go half(r.down, r.up)
	wg.Wait()
	r.down.Close()
	r.up.Close()
}

func (r *relay) reset() {
	resetConn(r.down)
	resetConn(r.up)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "ztunnel stand-in %d: "+format+"\n", append([]any{os.Getpid()}, args...)...)
}
