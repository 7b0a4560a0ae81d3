package orchestrator

import (
	"context"
	"sync"
	"time"
)

// changes is a broadcast of informer events: a waiter takes wait()'s channel
// before it looks at the caches, and the channel is closed on the next event,
// so a step reacts to the watch instead of polling, and no event between the
// look and the wait is lost.
type changes struct {
	mu sync.Mutex
	ch chan struct{}
}

func (c *changes) wait() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch == nil {
		c.ch = make(chan struct{})
	}
	return c.ch
}

func (c *changes) broadcast() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch != nil {
		close(c.ch)
		c.ch = nil
	}
}

// changed is every informer event handler: it wakes waiting steps and the
// reconcile loop.
func (e *executor) changed() {
	e.changes.broadcast()
	e.poke()
}

// idleCheck bounds a wait on changes when no event comes (a deadline
// computed from the clock, or a missed event): it only re-reads the caches.
const idleCheck = time.Second

// waitChange blocks until the next informer event after ch was taken, the
// deadline (if not zero), idleCheck, or the end of ctx.
func waitChange(ctx context.Context, ch <-chan struct{}, deadline time.Time, now func() time.Time) error {
	d := idleCheck
	if !deadline.IsZero() {
		d = min(d, max(deadline.Sub(now()), 0))
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-ch:
	case <-t.C:
	}
	return nil
}
