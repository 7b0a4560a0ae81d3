package observe

import (
	"context"
	"sync"
	"time"
)

// Changes is a broadcast of informer events: a waiter takes Wait's channel
// before it looks at the caches, and the channel is closed on the next event,
// so a step reacts to the watch instead of polling, and no event between the
// look and the wait is lost.
type Changes struct {
	mu sync.Mutex
	ch chan struct{}
}

// Wait is the channel the next Broadcast closes.
func (c *Changes) Wait() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch == nil {
		c.ch = make(chan struct{})
	}
	return c.ch
}

// Broadcast wakes every waiter.
func (c *Changes) Broadcast() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ch != nil {
		close(c.ch)
		c.ch = nil
	}
}

// IdleCheck bounds a wait on changes when no event comes (a deadline
// computed from the clock, or a missed event): it only re-reads the caches.
const IdleCheck = time.Second

// WaitChange blocks until the next informer event after ch was taken, the
// deadline (if not zero), IdleCheck, or the end of ctx.
func WaitChange(ctx context.Context, ch <-chan struct{}, deadline time.Time, now func() time.Time) error {
	d := IdleCheck
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

// SleepUntil waits until t by the clock now, or the end of ctx.
func SleepUntil(ctx context.Context, t time.Time, now func() time.Time) error {
	d := t.Sub(now())
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// CancelWhen is ctx, also cancelled with the cause check returns, checked
// at once and then every period (in the caches: no request), and a func
// that ends it.
func CancelWhen(ctx context.Context, every time.Duration, check func() error) (context.Context, func()) {
	cctx, cancel := context.WithCancelCause(ctx)
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if cause := check(); cause != nil {
				cancel(cause)
				return
			}
			select {
			case <-cctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return cctx, func() { cancel(context.Canceled) }
}
