package leader

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// ErrNotLeading is what a write refused by a Guard wraps: this replica does
// not know itself to hold the Lease now, so it must not write.
var ErrNotLeading = errors.New("not leading (this replica does not hold the leader Lease now)")

// Guard is the write fence of a replica that leads by a Lease. The replica
// holds while now < sent + hold, where sent is when the last successful
// acquire or renew request was sent and hold is RenewDeadline: the lease
// duration less a margin (LeaseDuration − RenewDeadline) for clock rates
// and for a write in flight. A standby takes over only a full lease
// duration after it saw that renew, which landed after it was sent, so the
// guard lapses before anyone else may lead.
//
// The clock is the monotonic one (Go's time.Now reading), which keeps
// counting while the process is stopped (SIGSTOP, a paused VM's guest
// excepted): a replica that wakes after its lease lapsed refuses every write
// before its elector has even tried to renew. client-go cancels the leader's
// context only after its renew deadline passes in its own goroutine, which
// races the writers woken at the same moment; the guard does not.
//
// A nil *Guard holds always (a controller without a fence).
type Guard struct {
	now  func() time.Time
	hold time.Duration

	mu    sync.Mutex
	until time.Time // zero: not leading
}

// NewGuard is the guard of a Lease renewed within renewDeadline.
func NewGuard(renewDeadline time.Duration) *Guard {
	return &Guard{now: time.Now, hold: renewDeadline}
}

// Check returns nil while the replica holds the Lease, and an error wrapping
// ErrNotLeading otherwise. Call it immediately before a write.
func (g *Guard) Check() error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	until := g.until
	g.mu.Unlock()
	switch now := g.now(); {
	case until.IsZero():
		return ErrNotLeading
	case !now.Before(until):
		return fmt.Errorf("%w: the last renew of the Lease was sent %s ago (the fence holds %s)", ErrNotLeading, now.Sub(until.Add(-g.hold)).Round(time.Millisecond), g.hold)
	}
	return nil
}

// Renewed records a successful acquire or renew of the Lease whose request
// was sent at sent (read from the guard's clock, Now, before sending).
func (g *Guard) Renewed(sent time.Time) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if u := sent.Add(g.hold); u.After(g.until) {
		g.until = u
	}
}

// Lost ends the holding at once (the Lease was released or lost).
func (g *Guard) Lost() {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.until = time.Time{}
	g.mu.Unlock()
}

// Now reads the guard's clock.
func (g *Guard) Now() time.Time {
	if g == nil {
		return time.Now()
	}
	return g.now()
}

// Wrap returns a copy of cfg whose requests other than reads (GET, HEAD,
// OPTIONS: get, list, watch) are checked by the guard as they leave: a
// refused one fails with an error wrapping ErrNotLeading and never reaches
// the API server. Every client built from the copy is fenced, the ones a
// library builds requests with (the drain's evictions, the event recorder)
// included; the Lease's own client must not be.
func (g *Guard) Wrap(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper { return fenced{g: g, rt: rt} })
	return c
}

type fenced struct {
	g  *Guard
	rt http.RoundTripper
}

func (f fenced) RoundTrip(r *http.Request) (*http.Response, error) {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		if err := f.g.Check(); err != nil {
			if r.Body != nil {
				_ = r.Body.Close() // a RoundTripper closes the body, even on error
			}
			return nil, fmt.Errorf("%s %s: %w", r.Method, r.URL.Path, err)
		}
	}
	return f.rt.RoundTrip(r)
}
