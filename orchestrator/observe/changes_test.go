package observe

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// closed says whether ch is closed, without blocking.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestChangesBroadcastWakesEveryWaiter: every waiter that took Wait's
// channel before a Broadcast is woken by it; a Broadcast with no waiter is
// harmless; a waiter that comes after a Broadcast gets a fresh channel that
// only the next Broadcast closes (no event is reported twice).
func TestChangesBroadcastWakesEveryWaiter(t *testing.T) {
	var c Changes
	c.Broadcast() // no waiter yet: nothing to close, no panic

	a, b := c.Wait(), c.Wait()
	if a != b {
		t.Fatal("two waiters before an event got different channels; one Broadcast must wake both")
	}
	if closed(a) {
		t.Fatal("the channel is closed before any event")
	}

	var woken sync.WaitGroup
	for range 3 {
		ch := c.Wait()
		woken.Add(1)
		go func() { defer woken.Done(); <-ch }()
	}
	c.Broadcast()
	all := make(chan struct{})
	go func() { woken.Wait(); close(all) }()
	select {
	case <-all:
	case <-time.After(5 * time.Second): // a guard against a hang, not a timing
		t.Fatal("a waiter was not woken by Broadcast")
	}
	if !closed(a) || !closed(b) {
		t.Fatal("Broadcast left a waiter's channel open")
	}

	next := c.Wait()
	if closed(next) {
		t.Fatal("a waiter after the Broadcast sees the old event")
	}
	c.Broadcast()
	c.Broadcast() // a second Broadcast with no new waiter does not close twice
	if !closed(next) {
		t.Fatal("the next Broadcast did not wake the next waiter")
	}
}

// TestWaitChange: the wait ends with the event, at a deadline already
// passed by the clock, or with ctx (cancelled or timed out), and only the
// end of ctx is an error.
func TestWaitChange(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	var c Changes

	t.Run("event", func(t *testing.T) {
		ch := c.Wait()
		go c.Broadcast()
		if err := WaitChange(t.Context(), ch, time.Time{}, clock); err != nil {
			t.Fatalf("woken by an event: %v", err)
		}
	})
	t.Run("deadline passed", func(t *testing.T) {
		// No event will come; the deadline is an hour behind the clock.
		if err := WaitChange(t.Context(), c.Wait(), now.Add(-time.Hour), clock); err != nil {
			t.Fatalf("past the deadline: %v", err)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		err := WaitChange(ctx, c.Wait(), now.Add(time.Hour), clock)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("WaitChange on a cancelled ctx = %v, want context.Canceled", err)
		}
	})
	t.Run("timed out", func(t *testing.T) {
		// The ctx ends long before IdleCheck or the deadline.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
		defer cancel()
		err := WaitChange(ctx, c.Wait(), now.Add(time.Hour), clock)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitChange past ctx's deadline = %v, want context.DeadlineExceeded", err)
		}
	})
}

// TestSleepUntil: a time already reached returns at once (even on an ended
// ctx), a near time is slept to, and the end of ctx cuts a long sleep short
// with its error.
func TestSleepUntil(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }

	done, cancel := context.WithCancel(t.Context())
	cancel()
	if err := SleepUntil(done, now, clock); err != nil {
		t.Errorf("until now, on an ended ctx: %v; want nil (nothing to wait for)", err)
	}
	if err := SleepUntil(done, now.Add(-time.Minute), clock); err != nil {
		t.Errorf("until a past time: %v", err)
	}
	if err := SleepUntil(t.Context(), now.Add(5*time.Millisecond), clock); err != nil {
		t.Errorf("until 5ms ahead: %v", err)
	}
	if err := SleepUntil(done, now.Add(time.Hour), clock); !errors.Is(err, context.Canceled) {
		t.Errorf("an hour's sleep on a cancelled ctx = %v, want context.Canceled", err)
	}
	ctx, cancelT := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancelT()
	if err := SleepUntil(ctx, now.Add(time.Hour), clock); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("an hour's sleep past ctx's deadline = %v, want context.DeadlineExceeded", err)
	}
}

// TestCancelWhen: the returned ctx is cancelled with the cause check
// returns (checked at once, then every period), with context.Canceled by
// its stop func, and with its parent.
func TestCancelWhen(t *testing.T) {
	errGone := errors.New("the rollout was deleted")
	// waitDone guards against a hang: CancelWhen never ending ctx is the
	// failure, reported instead of blocking the suite.
	waitDone := func(t *testing.T, ctx context.Context) {
		t.Helper()
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("ctx was never cancelled")
		}
	}

	t.Run("cause checked at once", func(t *testing.T) {
		ctx, stop := CancelWhen(t.Context(), time.Hour, func() error { return errGone })
		defer stop()
		waitDone(t, ctx)
		if cause := context.Cause(ctx); !errors.Is(cause, errGone) {
			t.Fatalf("cause %v, want %v", cause, errGone)
		}
	})
	t.Run("cause found on a later check", func(t *testing.T) {
		var calls atomic.Int32
		ctx, stop := CancelWhen(t.Context(), time.Millisecond, func() error {
			if calls.Add(1) < 3 {
				return nil
			}
			return errGone
		})
		defer stop()
		waitDone(t, ctx)
		if cause := context.Cause(ctx); !errors.Is(cause, errGone) {
			t.Fatalf("cause %v, want %v", cause, errGone)
		}
		if n := calls.Load(); n != 3 {
			t.Fatalf("check called %d times, want 3 (stopped at the first cause)", n)
		}
	})
	t.Run("stopped", func(t *testing.T) {
		ctx, stop := CancelWhen(t.Context(), time.Hour, func() error { return nil })
		if ctx.Err() != nil {
			t.Fatal("cancelled while check found nothing")
		}
		stop()
		waitDone(t, ctx)
		if cause := context.Cause(ctx); !errors.Is(cause, context.Canceled) {
			t.Fatalf("cause %v, want context.Canceled", cause)
		}
	})
	t.Run("parent ends", func(t *testing.T) {
		parent, cancel := context.WithCancel(t.Context())
		ctx, stop := CancelWhen(parent, time.Hour, func() error { return nil })
		defer stop()
		cancel()
		waitDone(t, ctx)
		if !errors.Is(ctx.Err(), context.Canceled) {
			t.Fatalf("err %v, want context.Canceled from the parent", ctx.Err())
		}
	})
}
