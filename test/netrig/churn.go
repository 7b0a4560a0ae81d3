package netrig

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"sort"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Churned is what one Churn run did.
type Churned struct {
	Lat    []time.Duration // the connect durations
	Conns  int             // connections made
	Failed int             // connections that failed
	// Connected counts the connects that succeeded, those whose echo
	// then failed too: what the agent should count as connects.
	Connected int
	Why       map[string]int // failures by error
	Elapsed   time.Duration
	// CPU is the CPU time this process spent over the run (user and
	// system: both ends of every connection, the echo servers' too, and
	// what the kernel did for them in this process's time), from its
	// rusage.
	CPU time.Duration
}

// Rate is the new connections a second achieved.
func (l Churned) Rate() float64 { return float64(l.Conns) / l.Elapsed.Seconds() }

// CPUPerConn is the generator's CPU time per connection made: what sets
// the rate it can reach on a given number of idle cores.
func (l Churned) CPUPerConn() time.Duration {
	return l.CPU / time.Duration(max(l.Conns, 1))
}

// processCPU is this process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Churn opens and closes paced short connections from every pod to its own
// echo server on port (ServeRawEcho): rate new connections a second offered
// across the pods together, for d. A pod behind its schedule dials without
// pausing until it has caught up, but none dials after d, so a generator
// that cannot offer the rate makes fewer connections in the same time, and
// the result's Rate says what it achieved.
func Churn(pods []*Pod, port int, rate float64, d time.Duration) Churned {
	var mu sync.Mutex
	var wg sync.WaitGroup
	// Every pod's thread is locked to it and makes blocking system calls:
	// with a P for each, a thread back from the kernel runs on at once,
	// where with GOMAXPROCS at the CPU count it would queue for one of
	// two Ps behind a hundred others (and the cores would idle meanwhile).
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(len(pods) + runtime.NumCPU()))
	var l Churned
	cpu0 := processCPU()
	start := time.Now()
	interval := time.Duration(float64(time.Second) * float64(len(pods)) / rate)
	for _, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.Enter(); err != nil {
				return
			}
			target := &unix.SockaddrInet4{Port: port, Addr: [4]byte(p.IP.To4())}
			buf := make([]byte, 16)
			var mine []time.Duration
			why := map[string]int{}
			connects := 0
			for i := 0; ; i++ {
				next := start.Add(time.Duration(i) * interval)
				if next.Sub(start) >= d || time.Since(start) >= d {
					break
				}
				if w := time.Until(next); w > 0 {
					time.Sleep(w)
				}
				took, connected, err := EchoOnce(target, buf)
				if connected {
					connects++
				}
				if err != nil {
					why[err.Error()]++
					continue
				}
				mine = append(mine, took)
			}
			mu.Lock()
			l.Lat = append(l.Lat, mine...)
			l.Connected += connects
			for err, n := range why {
				if l.Why == nil {
					l.Why = map[string]int{}
				}
				l.Why[err] += n
				l.Failed += n
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	l.Elapsed = time.Since(start)
	l.CPU = processCPU() - cpu0
	l.Conns = len(l.Lat)
	return l
}

// AddEchoPods adds n pods, named prefix-0 and on, each serving echo on
// port (ServeRawEcho): the churn's pods.
func (r *Rig) AddEchoPods(prefix string, n, port int) []*Pod {
	r.t.Helper()
	pods := make([]*Pod, 0, n)
	for i := range n {
		p := r.AddPod(fmt.Sprintf("%s-%d", prefix, i))
		ServeRawEcho(r.t, p, port)
		pods = append(pods, p)
	}
	return pods
}

// ServeRawEcho serves echo on port inside the pod's namespace from one
// thread making blocking system calls, as EchoOnce does on the client side:
// Go's net server costs a poller wake-up and a goroutine hand-off per
// connection, which held the generator near 10,000 connections a second on
// 2 cores. The listening socket is shut down when the test ends, and the
// thread (locked into the pod's namespace) exits with its goroutine.
func ServeRawEcho(t testing.TB, p *Pod, port int) {
	t.Helper()
	listening := make(chan int, 1)
	failed := make(chan error, 1)
	go func() {
		if err := p.Enter(); err != nil {
			failed <- err
			return
		}
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		// Accepted sockets inherit the listener's read timeout: no
		// system call per connection to set it.
		tv := unix.NsecToTimeval((5 * time.Second).Nanoseconds())
		if err == nil {
			err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
		}
		if err == nil {
			err = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
		}
		if err == nil {
			err = unix.Bind(fd, &unix.SockaddrInet4{Port: port})
		}
		if err == nil {
			err = unix.Listen(fd, 4096)
		}
		if err != nil {
			failed <- fmt.Errorf("echo server in %s: %w", p.Name, err)
			return
		}
		listening <- fd
		buf := make([]byte, 64)
		for {
			c, _, err := unix.Accept4(fd, unix.SOCK_CLOEXEC)
			switch {
			// EAGAIN: the inherited timeout, on an idle listener.
			case errors.Is(err, unix.EINTR), errors.Is(err, unix.ECONNABORTED), errors.Is(err, unix.EAGAIN):
				continue
			case err != nil:
				return // shut down
			}
			// A signal ends a read that has a timeout with EINTR:
			// closing then, with the request unread, would reset
			// the client's connection.
			n, err := unix.Read(c, buf)
			for errors.Is(err, unix.EINTR) {
				n, err = unix.Read(c, buf)
			}
			if err == nil && n > 0 {
				_, _ = unix.Write(c, buf[:n])
			}
			unix.Close(c)
		}
	}()
	select {
	case err := <-failed:
		t.Fatal(err)
	case fd := <-listening:
		t.Cleanup(func() { _ = unix.Shutdown(fd, unix.SHUT_RDWR); unix.Close(fd) })
	}
}

// EchoOnce connects to an echo server from the calling thread's namespace,
// sends buf, reads it back and closes, and returns the connect's duration
// and whether the connect succeeded (the echo may fail after it).
// It makes blocking system calls: a goroutine locked to its thread (as a
// pod's must be) that waits in Go's poller costs a futex handoff between
// threads each time, which capped the generator well below a busy node's
// rates.
func EchoOnce(to *unix.SockaddrInet4, buf []byte) (time.Duration, bool, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, false, err
	}
	defer unix.Close(fd)
	// Bound the read, should the server never answer; a timeout on the
	// connect would make a signal end it with EINTR, on loopback it
	// needs none.
	tv := unix.NsecToTimeval((5 * time.Second).Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return 0, false, err
	}
	t0 := time.Now()
	if err := unix.Connect(fd, to); err != nil {
		return 0, false, fmt.Errorf("connect: %w", err)
	}
	took := time.Since(t0)
	if _, err := unix.Write(fd, buf); err != nil {
		return 0, true, fmt.Errorf("write: %w", err)
	}
	for n := 0; n < len(buf); {
		m, err := unix.Read(fd, buf[n:])
		if errors.Is(err, unix.EINTR) { // a signal, with SO_RCVTIMEO set
			continue
		}
		if err != nil {
			return 0, true, fmt.Errorf("read: %w", err)
		}
		if m == 0 {
			return 0, true, io.ErrUnexpectedEOF
		}
		n += m
	}
	return took, true, nil
}

// Quantile is the q-quantile of xs (0 when empty).
func Quantile(xs []time.Duration, q float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), xs...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(q*float64(len(s)-1))]
}
