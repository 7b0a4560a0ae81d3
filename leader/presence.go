package leader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// AddressAnnotation is written on a leader Lease by each write of its
// holder: the address (host:port) where the holder's process answers
// PresencePath for as long as it lives (Election.Address).
const AddressAnnotation = "nodewise.io/leader-address"

// PresencePath is served by a replica's metrics server: a GET is answered
// at once with the replica's identity (identityHeader), then held open for as
// long as the process lives. A standby keeps one open to the holder of its
// Lease: the holder's process ending closes it (the kernel closes the
// sockets of a process that exits, SIGKILL included).
const PresencePath = "/leader/presence"

const identityHeader = "Nodewise-Identity"

// presenceKeepalive is how often an open presence stream carries a byte, so
// no idle-connection reaper between two replicas cuts it.
const presenceKeepalive = 20 * time.Second

// presence answers PresencePath for the replica identity.
func presence(identity string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(identityHeader, identity)
		w.WriteHeader(http.StatusOK)
		flush := func() {
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
		}
		flush()
		t := time.NewTicker(presenceKeepalive)
		defer t.Stop()
		for {
			select {
			case <-r.Context().Done():
				return
			case <-t.C:
				if _, err := w.Write([]byte("\n")); err != nil {
					return
				}
				flush()
			}
		}
	}
}

// holderWatch follows the process of the Lease's holder, for a standby,
// through its presence stream at the address the holder writes on the Lease.
// When the stream ends and the address then refuses connections, nothing
// listens there any more: the holder's process is gone (it listens from
// before it campaigns until it exits), and its Lease is reported expired
// without waiting out the lease duration. Anything else (a timeout, a reset,
// an answer) proves nothing, and the Lease expires as it would.
type holderWatch struct {
	ctx    context.Context // the Lease watch's: the streams end with it
	self   string          // this replica's identity, never followed
	log    *zap.Logger
	client *http.Client
	gone   func() // told when the watched holder's process is found gone

	mu       sync.Mutex
	target   string // holder@address watched; "" none
	cancel   context.CancelFunc
	goneHold string // the holder whose process is gone
}

func newHolderWatch(ctx context.Context, self string, log *zap.Logger, gone func()) *holderWatch {
	d := &net.Dialer{Timeout: 2 * time.Second, KeepAlive: 10 * time.Second}
	return &holderWatch{ctx: ctx, self: self, log: log, gone: gone, client: &http.Client{Transport: &http.Transport{
		DialContext: d.DialContext, DisableKeepAlives: true, ResponseHeaderTimeout: 5 * time.Second,
	}}}
}

// follow watches holder at addr from now on (holder "" or this replica,
// or addr "": nothing). Called with each Lease the watch shows.
func (h *holderWatch) follow(holder, addr string) {
	target := ""
	if holder != "" && holder != h.self && addr != "" {
		target = holder + "@" + addr
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if holder != h.goneHold {
		h.goneHold = ""
	}
	if target == h.target {
		return
	}
	if h.cancel != nil {
		h.cancel()
		h.cancel = nil
	}
	h.target = target
	if target == "" {
		return
	}
	wctx, cancel := context.WithCancel(h.ctx)
	h.cancel = cancel
	go h.watch(wctx, holder, addr)
}

// isGone reports whether holder's process was found gone.
func (h *holderWatch) isGone(holder string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return holder != "" && holder == h.goneHold
}

func (h *holderWatch) watch(ctx context.Context, holder, addr string) {
	log := h.log.With(zap.String("holder", holder), zap.String("address", addr))
	for quick := 0; ctx.Err() == nil; {
		opened := time.Now()
		err := h.stream(ctx, holder, addr)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			h.mu.Lock()
			if h.target == holder+"@"+addr {
				h.goneHold = holder
			}
			h.mu.Unlock()
			log.Info("the leader's process is gone (its address refuses connections): taking over without waiting for its Lease to expire")
			h.gone()
			return
		}
		log.Debug("the leader's presence stream ended", zap.Error(err))
		// A stream that keeps ending at once is not dialled in a loop.
		if time.Since(opened) < time.Second {
			quick++
		} else {
			quick = 0
		}
		if quick > 1 {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// stream holds a presence stream to holder at addr until it ends.
func (h *holderWatch) stream(ctx context.Context, holder, addr string) error {
	resp, err := askPresence(ctx, h.client, addr, holder)
	if err != nil {
		if resp != nil {
			// Another process answers there (or none that knows the path):
			// wait for the Lease to expire rather than conclude anything.
			select {
			case <-ctx.Done():
			case <-time.After(presenceKeepalive):
			}
		}
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

// askPresence opens PresencePath at addr with c and checks that it answers
// as identity. On an answer as anything else it closes it and returns it
// beside the error.
func askPresence(ctx context.Context, c *http.Client, addr, identity string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+PresencePath, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	if got := resp.Header.Get(identityHeader); resp.StatusCode != http.StatusOK || got != identity {
		resp.Body.Close()
		return resp, fmt.Errorf("%s answers %s as %q (HTTP %d), not as %q", addr, PresencePath, got, resp.StatusCode, identity)
	}
	return resp, nil
}

// reachable checks that addr answers PresencePath as identity, as a standby
// would ask: an address that does not (a wrong port, an IP the other
// replicas cannot reach) is not written on the Lease, since a standby that
// finds it refusing would take the Lease over from a live leader.
// It asks for 5 s at most: the process's metrics server may start beside
// the election.
func reachable(ctx context.Context, addr, identity string) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		resp, err := askPresence(ctx, http.DefaultClient, addr, identity)
		if err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}
