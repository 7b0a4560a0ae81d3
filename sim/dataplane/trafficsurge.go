package dataplane

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"go.uber.org/zap"
)

// load is the pace of every app pod's clients, shared by all of them (pods
// started later too): 1 normally, TrafficSurge's factor while a surge lasts.
type load struct {
	mu     sync.Mutex
	factor float64
	until  time.Time
}

// now is the current load factor.
func (l *load) now() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.factor > 0 && time.Now().Before(l.until) {
		return l.factor
	}
	return 1
}

// gap is d at the current pace: a client under a ×3 surge waits a third.
func (l *load) gap(d time.Duration) time.Duration {
	return time.Duration(float64(d) / l.now())
}

// aborts says whether a short request ends with an abortive close: one in
// every (Traffic.AbortEvery / load factor), so a surge raises the share
// (see Traffic.AbortEvery). every ≤ 0 never aborts.
func (l *load) aborts(every int) bool {
	if every <= 0 {
		return false
	}
	return rand.Float64() < l.now()/float64(every)
}

// TrafficSurge multiplies the pace of every app pod's clients by factor for
// dur: the pause between short requests and between a stream's messages is
// divided by it, on every node, in pods started meanwhile too. It is the
// rig's cluster-wide traffic change (a control group sees it as the judged
// node does). With Traffic.AbortEvery set, the share of short requests that
// end with an abortive close rises by factor as well. A new TrafficSurge
// replaces the one in force; factor 1 (or dur 0) ends it.
func (d *DataPlane) TrafficSurge(factor float64, dur time.Duration) error {
	if factor <= 0 || factor > 100 {
		return fmt.Errorf("dataplane: surge factor %g: must be in (0, 100]", factor)
	}
	d.load.mu.Lock()
	defer d.load.mu.Unlock()
	d.load.factor, d.load.until = factor, time.Now().Add(dur)
	d.log.Info("traffic surge on every client", zap.Float64("factor", factor), zap.Duration("for", dur))
	return nil
}
