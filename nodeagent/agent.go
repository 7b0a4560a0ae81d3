package nodeagent

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"golang.org/x/net/netutil"

	"github.com/nodewise/nodewise/health/wire"
)

// Agent is one node's agent. Build it with New, start it with Run.
type Agent struct {
	cfg   Config
	log   *zap.Logger
	tls   *tls.Config
	auth  Authenticator
	start time.Time

	modeGauge *prometheus.GaugeVec
	fallback  prometheus.Gauge
	untracked atomic.Uint64
	missed    atomic.Uint64
	// seq numbers the snapshots built since start (wire.Snapshot.Seq).
	seq atomic.Uint64

	mu       sync.Mutex
	src      source
	resolver Resolver

	hist *history
	// enrollGauge counts the ambient pods by enrollment result (Config.Mesh).
	enrollGauge *prometheus.GaugeVec

	ready chan struct{}
	addr  net.Addr
}

// New validates cfg, fills its defaults and loads the certificate and the
// token. It loads no eBPF and opens no port: Run does.
func New(cfg Config) (*Agent, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	tlsConfig := &tls.Config{GetCertificate: cfg.GetCertificate, MinVersion: tls.VersionTLS12}
	if cfg.GetCertificate == nil {
		cert, err := loadCert(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, err
		}
		tlsConfig.Certificates = []tls.Certificate{cert}
	}
	auth := cfg.Authenticator
	if auth == nil {
		ta, err := newTokenAuth(cfg.TokenFile, cfg.Logger)
		if err != nil {
			return nil, err
		}
		auth = ta
	}
	a := &Agent{
		cfg:  cfg,
		log:  cfg.Logger,
		tls:  tlsConfig,
		auth: auth,
		modeGauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "nodewise_agent_mode",
			Help: "1 for the counting mode in use (ebpf or proc).",
		}, []string{"mode"}),
		fallback: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nodewise_agent_ebpf_fallback",
			Help: "1 when --mode=auto could not load the eBPF programs and fell back to /proc (a warning: no histograms, no sides, no ages).",
		}),
		hist:  newHistory(cfg.HistoryEvery, cfg.HistoryKeep, cfg.HistoryMaxBytes),
		ready: make(chan struct{}),
	}
	untracked := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "nodewise_agent_untracked_connections_total",
		Help: "Established connections the kernel map had no room for (as of the last read): they are missing from the connection ages.",
	}, func() float64 { return float64(a.untracked.Load()) })
	missed := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "nodewise_agent_missed_events_total",
		Help: "Program runs the kernel skipped because the same program was already running on that CPU (a softirq interrupting a system call's run), as of the last read: their events are not counted, and a skipped close can leave a connection in the ages until its socket's address is reused.",
	}, func() float64 { return float64(a.missed.Load()) })
	if err := errors.Join(
		cfg.Registry.Register(a.modeGauge),
		cfg.Registry.Register(a.fallback),
		cfg.Registry.Register(untracked),
		cfg.Registry.Register(missed),
		cfg.Registry.Register(newCollector(a.Snapshot, !cfg.NoPodHistograms)),
		cfg.Registry.Register(newCNICollector(a)),
	); err != nil {
		return nil, fmt.Errorf("registering metrics: %w", err)
	}
	if cfg.Mesh != nil {
		g, err := newEnrollmentGauge(cfg.Registry)
		if err != nil {
			return nil, fmt.Errorf("registering metrics: %w", err)
		}
		a.enrollGauge = g
	}
	return a, nil
}

// openSource picks the counting source for the configured mode.
func (a *Agent) openSource() (source, error) {
	if a.cfg.Mode == ModeProc {
		return newProcSource(a.cfg.ProcRoot), nil
	}
	p, err := a.cfg.loadProbe()
	if err == nil {
		return &ebpfSource{p: p}, nil
	}
	if a.cfg.Mode == ModeEBPF {
		return nil, fmt.Errorf("loading eBPF (mode ebpf has no fallback): %w", err)
	}
	a.log.Warn("eBPF programs did not load; falling back to /proc counters", zap.Error(err))
	a.fallback.Set(1)
	return newProcSource(a.cfg.ProcRoot), nil
}

// defaultResolver is Config.Resolver, or the resolvers that fit the source.
func (a *Agent) defaultResolver(src source) (Resolver, error) {
	if a.cfg.Resolver != nil {
		return a.cfg.Resolver, nil
	}
	es, ok := src.(*ebpfSource)
	if !ok {
		return &ProcResolver{ProcRoot: a.cfg.ProcRoot, Key: KeyProcNet, Lister: a.cfg.PodLister}, nil
	}
	proc := &ProcResolver{ProcRoot: a.cfg.ProcRoot, Key: KeyNetnsInode, Lister: a.cfg.PodLister}
	// The agent runs in the host's network namespace (hostNetwork), so its
	// own namespace is the one never to attribute.
	host, err := nsInode("/proc/self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("reading the agent's own network namespace: %w", err)
	}
	return unionResolver{
		&CgroupResolver{Owners: es.p.ReadNetnsCgroups, CgroupRoot: a.cfg.CgroupRoot, HostNetns: host, Lister: a.cfg.PodLister},
		proc,
	}, nil
}

// Run listens, loads the counting source and serves until ctx is done.
func (a *Agent) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", a.cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", a.cfg.ListenAddr, err)
	}
	src, err := a.openSource()
	if err != nil {
		ln.Close()
		return err
	}
	defer src.close()
	a.start = time.Now()
	if _, err := src.read(); err != nil { // the proc source takes its baseline here
		ln.Close()
		return fmt.Errorf("first read of the %s counters: %w", src.mode(), err)
	}
	res, err := a.defaultResolver(src)
	if err != nil {
		ln.Close()
		return err
	}
	a.mu.Lock()
	a.src, a.resolver = src, res
	a.mu.Unlock()
	a.modeGauge.WithLabelValues(src.mode()).Set(1)
	a.log.Info("node agent started", zap.String("node", a.cfg.Node), zap.String("mode", src.mode()), zap.String("addr", ln.Addr().String()))

	const writeTimeout = 30 * time.Second // a snapshot or a scrape, even of a busy node
	srv := &http.Server{
		Handler:           a.handler(),
		ReadHeaderTimeout: a.cfg.ReadHeaderTimeout,
		ReadTimeout:       a.cfg.ReadHeaderTimeout, // GETs: the headers are the request
		WriteTimeout:      writeTimeout,
		IdleTimeout:       a.cfg.IdleTimeout,
		MaxHeaderBytes:    16 << 10,
		TLSConfig:         a.tls,
		ErrorLog:          zap.NewStdLog(a.log),
	}
	a.addr = ln.Addr()
	close(a.ready)
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(netutil.LimitListener(ln, a.cfg.MaxConnections), "", "") }()
	go a.keepHistory(ctx)
	select {
	case err := <-errc:
		return fmt.Errorf("serving: %w", err)
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shut); err != nil {
		// A client may hold a connection it has not sent on yet (an
		// HTTP client dials ahead): Shutdown waits for those, so end
		// them rather than fail the exit.
		a.log.Warn("closing the connections still open after 5 s of shutdown", zap.Error(err))
		_ = srv.Close()
	}
	return nil
}

// Addr waits until Run listens and returns the address (useful with port 0).
func (a *Agent) Addr(ctx context.Context) (net.Addr, error) {
	select {
	case <-a.ready:
		return a.addr, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Snapshot reads the counters and attributes them to pods.
func (a *Agent) Snapshot() (wire.Snapshot, error) {
	a.mu.Lock()
	src, res := a.src, a.resolver
	a.mu.Unlock()
	if src == nil {
		return wire.Snapshot{}, errors.New("agent not running")
	}
	r, err := src.read()
	if err != nil {
		return wire.Snapshot{}, fmt.Errorf("reading %s counters: %w", src.mode(), err)
	}
	a.untracked.Store(r.untracked)
	a.missed.Store(r.missed)
	pods, err := res.Pods()
	if err != nil {
		return wire.Snapshot{}, fmt.Errorf("resolving pods: %w", err)
	}
	meta := snapshotMeta{node: a.cfg.Node, mode: src.mode(), version: a.cfg.Version, start: a.start, now: time.Now(), seq: a.seq.Add(1)}
	s := buildSnapshot(meta, r, pods)
	s.Enrollment = a.enrollment(meta.now)
	return s, nil
}

func (a *Agent) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("GET /v1/snapshot", authenticated(a.auth, a.log, http.HandlerFunc(a.serveSnapshot)))
	mux.Handle("GET /v1/history", authenticated(a.auth, a.log, http.HandlerFunc(a.serveHistory)))
	mux.Handle("GET /v1/cni", authenticated(a.auth, a.log, http.HandlerFunc(a.serveCNI)))
	mux.Handle("GET /metrics", authenticated(a.auth, a.log, promhttp.HandlerFor(a.cfg.Registry, promhttp.HandlerOpts{})))
	return mux
}

func (a *Agent) serveSnapshot(w http.ResponseWriter, _ *http.Request) {
	s, err := a.Snapshot()
	if err != nil {
		a.log.Error("snapshot failed", zap.Error(err))
		http.Error(w, "snapshot failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(s); err != nil {
		a.log.Debug("writing snapshot", zap.Error(err))
	}
}

// keepHistory takes a snapshot into the history now and every HistoryEvery
// until ctx ends. A failed read is logged and leaves a gap, which the
// orchestrator sees as fewer samples.
func (a *Agent) keepHistory(ctx context.Context) {
	t := time.NewTicker(a.cfg.HistoryEvery)
	defer t.Stop()
	for {
		s, err := a.Snapshot()
		if err == nil {
			err = a.hist.add(s)
		}
		if err != nil {
			a.log.Warn("history snapshot failed", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// History is the snapshots kept since t (all of them for the zero time),
// as /v1/history serves them.
func (a *Agent) History(since time.Time) (wire.History, error) {
	snaps, err := a.hist.since(since)
	if err != nil {
		return wire.History{}, err
	}
	return wire.History{
		Node: a.cfg.Node, StartTime: a.start, Now: time.Now(),
		Every: a.cfg.HistoryEvery, Keep: a.cfg.HistoryKeep, Snapshots: snaps,
	}, nil
}

// serveHistory answers GET /v1/history?since=<RFC 3339 time>.
func (a *Agent) serveHistory(w http.ResponseWriter, r *http.Request) {
	var since time.Time
	if v := r.URL.Query().Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			http.Error(w, fmt.Sprintf("since %q: want an RFC 3339 time", v), http.StatusBadRequest)
			return
		}
		since = t
	}
	h, err := a.History(since)
	if err != nil {
		a.log.Error("history failed", zap.Error(err))
		http.Error(w, "history failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(h); err != nil {
		a.log.Debug("writing history", zap.Error(err))
	}
}
