// Package silence holds an Alertmanager silence over a node's alerts while
// a rollout has the node out: made when the node's slot starts (before its
// cordon), extended while its worker runs, expired when the node is handed
// back. Each silence ends a short TTL after its last extension, so one whose
// orchestrator crashed expires on its own. Alertmanager that cannot be
// reached never holds up or fails a node: the failure is logged, counted
// and shown as a Warning event on the rollout.
package silence

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// CreatedBy is the createdBy of every silence nodewise makes.
const CreatedBy = "nodewise"

// Config configures the silences. Zero values get the defaults below.
type Config struct {
	// URL is Alertmanager's base URL (required), its path prefix included.
	URL string
	// Matchers select the node's alerts, each in Alertmanager's matcher
	// syntax (name="value", !=, =~, !~); in a value, {{.Node}} is the
	// node's name and {{.Rollout}} the rollout's (default DefaultMatcher).
	Matchers []string
	// BearerTokenFile, when set, is read for each request and sent as a
	// bearer token.
	BearerTokenFile string
	// Extend is how often a held silence is extended (default 1m).
	Extend time.Duration
	// TTL is how far past each extension a silence ends: how long one
	// outlives a crashed orchestrator (default 3×Extend; more than Extend).
	TTL time.Duration
	// Timeout bounds each call to Alertmanager, its retries included
	// (default 5s): what a node's start waits at most for its silence.
	Timeout time.Duration
	// Registry receives nodewise_alertmanager_silence_errors_total (default: none).
	Registry prometheus.Registerer
	// Recorder gets a Warning event on the rollout when a call fails (default: none).
	Recorder record.EventRecorder
	// Logger is the structured logger (default: no-op).
	Logger *zap.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Silencer makes, extends and expires the silences.
type Silencer struct {
	cfg      Config
	api      *api
	matchers []matcherTemplate
	errors   *prometheus.CounterVec
	// down: the last call to Alertmanager failed. A node then starts
	// without waiting for its silence; its keeper makes it.
	down *atomic.Bool
}

// Validate checks cfg and fills its defaults; New calls it.
func (cfg *Config) Validate() error {
	_, err := cfg.validate()
	return err
}

func (cfg *Config) validate() ([]matcherTemplate, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("alertmanager URL %q: want an http:// or https:// URL", cfg.URL)
	}
	if len(cfg.Matchers) == 0 {
		cfg.Matchers = []string{DefaultMatcher}
	}
	var ms []matcherTemplate
	for _, m := range cfg.Matchers {
		t, err := parseMatcher(m)
		if err != nil {
			return nil, fmt.Errorf("alertmanager %w", err)
		}
		ms = append(ms, t)
	}
	if cfg.Extend == 0 {
		cfg.Extend = time.Minute
	}
	if cfg.TTL == 0 {
		cfg.TTL = 3 * cfg.Extend
	}
	if cfg.Extend <= 0 || cfg.TTL <= cfg.Extend {
		return nil, fmt.Errorf("alertmanager silence TTL %s must exceed its extend period %s (> 0)", cfg.TTL, cfg.Extend)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return ms, nil
}

// New validates cfg, fills its defaults and registers the metric.
func New(cfg Config) (*Silencer, error) {
	ms, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	s := &Silencer{matchers: ms, down: new(atomic.Bool)}
	s.errors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodewise_alertmanager_silence_errors_total",
		Help: "Calls to Alertmanager that failed while holding a node's silence, by operation (create, extend, expire, find). A failure never holds up a node.",
	}, []string{"op"})
	if cfg.Registry != nil {
		if err := cfg.Registry.Register(s.errors); err != nil {
			return nil, fmt.Errorf("registering the silence metric: %w", err)
		}
	}
	c := retryablehttp.NewClient()
	c.HTTPClient.Timeout = cfg.Timeout
	c.RetryMax, c.RetryWaitMin, c.RetryWaitMax = 2, 200*time.Millisecond, time.Second
	c.Logger = nil
	c.ErrorHandler = retryablehttp.PassthroughErrorHandler
	s.cfg, s.api = cfg, &api{base: strings.TrimSuffix(cfg.URL, "/"), tokenFile: cfg.BearerTokenFile, http: c}
	return s, nil
}

// WithRecorder is s with its Warning events recorded by rec (a leader's
// recorder, made for its term), sharing its client and metric.
func (s *Silencer) WithRecorder(rec record.EventRecorder) *Silencer {
	c := *s
	c.cfg.Recorder = rec
	return &c
}

// held is the silence over one node while a worker has it out.
type held struct {
	s        *Silencer
	nr       *v1alpha1.NodeRollout
	node     string
	matchers []Matcher
	stop     chan struct{}
	done     chan struct{}
	ended    sync.Once

	// Owned by the keeping goroutine until done closes.
	id               string
	startsAt, endsAt time.Time
	failing          bool
	// dropped: a person expired the silence before its end; it is not
	// made again for this node's time out.
	dropped bool
}

// Hold makes (or, after a restart, finds and takes over) the node's
// silence, waiting at most Timeout (not at all while Alertmanager's last
// call failed: the silence is then made behind the node's start), and
// extends it every Extend until end is called or ctx ends. A failure is
// reported and tried again at the next extension. end(true), for a node handed back (passed, failed, aborted,
// deleted), expires the silence now; end(false), for a node left behind
// (this replica stops leading, or shuts down), lets it run out its TTL for
// a successor to take over.
func (s *Silencer) Hold(ctx context.Context, nr *v1alpha1.NodeRollout, node string) (end func(handedBack bool)) {
	h := s.held(nr, node)
	if s.down.Load() {
		go func() { h.renew(ctx); h.keep(ctx) }()
	} else {
		h.renew(ctx)
		go h.keep(ctx)
	}
	return h.end
}

func (s *Silencer) held(nr *v1alpha1.NodeRollout, node string) *held {
	h := &held{s: s, nr: nr, node: node, stop: make(chan struct{}), done: make(chan struct{})}
	for _, t := range s.matchers {
		h.matchers = append(h.matchers, t.render(subject{Node: node, Rollout: nr.Name}))
	}
	return h
}

// end stops extending the silence, and expires it if handedBack.
func (h *held) end(handedBack bool) {
	h.ended.Do(func() { close(h.stop) })
	<-h.done
	if !handedBack {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.s.cfg.Timeout)
	defer cancel()
	id := h.id
	if id == "" {
		id = h.find(ctx) // made by a predecessor this replica never reached
	}
	if id == "" {
		return
	}
	if err := h.s.api.expire(ctx, id); err != nil {
		h.failed("expire", err)
		return
	}
	h.s.cfg.Logger.Info("alertmanager silence expired: the node is handed back",
		zap.String("rollout", h.nr.Name), zap.String("node", h.node), zap.String("silence", id))
}

func (h *held) keep(ctx context.Context) {
	defer close(h.done)
	t := time.NewTicker(h.s.cfg.Extend)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.stop:
			return
		case <-t.C:
			h.renew(ctx)
		}
	}
}

// comment names nodewise, the rollout and the node: a person reading
// Alertmanager knows who muted what, and a successor finds it by it.
func (h *held) comment() string {
	return fmt.Sprintf("nodewise: node %s is out for NodeRollout %s (data-plane swap); held while it is out, it expires on its own if nodewise stops", h.node, h.nr.Name)
}

// renew creates the silence, or extends the one held, to end TTL from now.
func (h *held) renew(ctx context.Context) {
	if h.dropped {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, h.s.cfg.Timeout)
	defer cancel()
	now := h.s.cfg.Now()
	op := "extend"
	if h.id != "" && h.expiredByHand(ctx) {
		h.s.cfg.Logger.Info("alertmanager silence expired by someone else before its end: not made again while the node is out",
			zap.String("rollout", h.nr.Name), zap.String("node", h.node), zap.String("silence", h.id))
		h.id, h.dropped = "", true
		return
	}
	if h.id == "" {
		op = "create"
		if h.id = h.find(ctx); h.id == "" {
			h.startsAt = now
		}
	}
	post := func() (string, error) {
		return h.s.api.post(ctx, Silence{
			ID: h.id, Matchers: h.matchers, StartsAt: h.startsAt, EndsAt: now.Add(h.s.cfg.TTL),
			CreatedBy: CreatedBy, Comment: h.comment(),
		})
	}
	id, err := post()
	if op == "extend" && errors.Is(err, errNotFound) {
		// Alertmanager lost it (restarted without its storage): make it anew.
		h.id, h.startsAt, op = "", now, "create"
		id, err = post()
	}
	if err != nil {
		h.failed(op, err)
		return
	}
	if h.failing || op == "create" {
		h.s.cfg.Logger.Info("alertmanager silence held while the node is out", zap.String("rollout", h.nr.Name),
			zap.String("node", h.node), zap.String("silence", id), zap.Duration("ttl", h.s.cfg.TTL))
	}
	h.id, h.endsAt, h.failing = id, now.Add(h.s.cfg.TTL), false
	h.s.down.Store(false)
}

// expiredByHand says the held silence has ended before the end this holder
// last gave it: someone expired it (one that ran out its TTL, its
// extensions failing, ends when it was given). Alertmanager gives times to
// the millisecond. A silence it cannot read is extended as usual.
func (h *held) expiredByHand(ctx context.Context) bool {
	cur, err := h.s.api.get(ctx, h.id)
	return err == nil && !cur.Active() && cur.EndsAt.Add(time.Millisecond).Before(h.endsAt)
}

// find returns the ID of this node's active silence made for this rollout,
// by a predecessor (or by this replica before a restart of the worker), and
// takes its start ("" when there is none or it cannot be read).
func (h *held) find(ctx context.Context) string {
	var filter []Matcher
	for _, m := range h.matchers {
		if m.IsEqual && !m.IsRegex {
			filter = append(filter, m)
		}
	}
	list, err := h.s.api.list(ctx, filter)
	if err != nil {
		h.failed("find", err)
		return ""
	}
	for _, sil := range list {
		if sil.Active() && sil.CreatedBy == CreatedBy && sil.Comment == h.comment() {
			h.startsAt = sil.StartsAt
			return sil.ID
		}
	}
	return ""
}

// failed reports a failed call: logged and counted each time, a Warning
// event on the rollout at the first of a run of failures. A call cut short
// by its worker's end (this replica leaving) is no failure of Alertmanager.
func (h *held) failed(op string, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	h.s.errors.WithLabelValues(op).Inc()
	h.s.down.Store(true)
	h.s.cfg.Logger.Warn("alertmanager silence: call failed; the node goes on without it", zap.String("op", op),
		zap.String("rollout", h.nr.Name), zap.String("node", h.node), zap.Error(err))
	if h.failing {
		return
	}
	h.failing = true
	if h.s.cfg.Recorder != nil {
		h.s.cfg.Recorder.Eventf(h.nr, corev1.EventTypeWarning, "SilenceFailed",
			"Alertmanager silence for node %s (%s) failed; the node goes on without it: %v", h.node, op, err)
	}
}
