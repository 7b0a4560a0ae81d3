package dashboard

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/clusters"
)

// DefaultAddress is where `nodewise dashboard` listens (Argo Rollouts'
// dashboard port, which its users know).
const DefaultAddress = "127.0.0.1:3100"

// RolloutClient is what the dashboard needs of NodeRollouts: list and
// watch for the pages, patch for the actions.
type RolloutClient interface {
	listWatcher[*v1alpha1.NodeRolloutList]
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*v1alpha1.NodeRollout, error)
}

// MigrationClient is what the dashboard needs of RevisionMigrations.
type MigrationClient interface {
	listWatcher[*v1alpha1.RevisionMigrationList]
}

// Config configures a dashboard. Zero values get the defaults below.
type Config struct {
	// Rollouts is required. Its credentials are the ones actions use.
	Rollouts RolloutClient
	// Migrations, when nil, leaves RevisionMigrations out.
	Migrations MigrationClient
	// ReadOnly hides the actions and refuses their requests (the
	// orchestrator's copy runs read-only).
	ReadOnly bool
	// Token is the session's secret (NewToken): every request but the
	// static files must carry it, as the cookie the printed URL (URL) sets
	// or as Authorization: Bearer. Required unless ReadOnly; empty only for
	// the orchestrator's copy, which listens on the pod's loopback and is
	// reached through kubectl port-forward.
	Token string
	// LoginHint ends the refusal of a request without the token: where the
	// URL to open was printed (default: by `nodewise dashboard`).
	LoginHint string
	// AllowedHosts are the names, "host" (any port) or "host:port", the
	// dashboard answers besides localhost, 127.0.0.1, [::1] and its listen
	// address: the names it is reached by when bound elsewhere than
	// loopback. Any other Host (a DNS-rebinding page's) is refused.
	AllowedHosts []string
	// Clusters reads several clusters at once (clusters.Read) for the
	// /clusters page; nil leaves the page out.
	Clusters func(ctx context.Context) []clusters.Report
	// Freshness, when set, serves /freshness: each team's proxies against
	// the target, read on each load (freshness.go); nil leaves it out.
	Freshness *FreshnessConfig
	// GrafanaURL is the base URL of a Grafana with nodewise's dashboards;
	// empty leaves the Grafana links out.
	GrafanaURL string
	// History, when set, reads the node agents' history: a judged node's
	// page then plots its baseline and soak against its control nodes' and
	// the probe's. Nil leaves the plots out, saying why.
	History HistorySource
	// Log receives the server's errors (default: discarded).
	Log *zap.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Server is the dashboard: its pages, its event stream and its actions.
type Server struct {
	cfg      Config
	style    template.CSS
	hub      *hub
	mux      *http.ServeMux
	tmpl     *template.Template
	allowed  []hostRule // Config.AllowedHosts
	tokenSum [sha256.Size]byte
	tabs     tabs // the rollout pages served, for their own event streams
	plots    plotCache
}

//go:embed assets
var assets embed.FS

// New validates cfg and builds the server; Start fills its caches.
func New(cfg Config) (*Server, error) {
	if cfg.Rollouts == nil {
		return nil, errors.New("dashboard: Config.Rollouts is required")
	}
	if cfg.GrafanaURL != "" && !strings.HasPrefix(cfg.GrafanaURL, "http://") && !strings.HasPrefix(cfg.GrafanaURL, "https://") {
		return nil, fmt.Errorf("dashboard: GrafanaURL %q must start with http:// or https://", cfg.GrafanaURL)
	}
	if cfg.Freshness != nil && cfg.Freshness.Client == nil {
		return nil, errors.New("dashboard: Config.Freshness.Client is required")
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	tmpl, err := template.New("").Funcs(template.FuncMap{"join": strings.Join}).ParseFS(assets, "assets/*.html")
	if err != nil {
		return nil, fmt.Errorf("dashboard: parsing the page templates: %w", err)
	}
	var migrations listWatcher[*v1alpha1.RevisionMigrationList]
	if cfg.Migrations != nil {
		migrations = cfg.Migrations
	}
	s := &Server{cfg: cfg, hub: newHub(cfg.Rollouts, migrations, cfg.Log), mux: http.NewServeMux(), tmpl: tmpl}
	if err := s.validateAccess(); err != nil {
		return nil, err
	}
	css, err := assets.ReadFile("assets/style.css")
	if err != nil {
		return nil, err
	}
	s.style = template.CSS(css) // our own embedded file
	static, _ := fs.Sub(assets, "assets")
	s.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	s.mux.HandleFunc("GET /{$}", s.page(s.listPage))
	s.mux.HandleFunc("GET /rollouts/{name}", s.page(s.rolloutPage))
	s.mux.HandleFunc("GET /rollouts/{name}/nodes/{node}", s.page(s.nodePage))
	s.mux.HandleFunc("GET /migrations/{name}", s.page(s.migrationPage))
	if s.cfg.Clusters != nil {
		s.mux.HandleFunc("GET /clusters", s.page(s.clustersPage))
	}
	if s.cfg.Freshness != nil {
		s.mux.HandleFunc("GET /freshness", s.page(s.freshnessPage))
	}
	s.mux.HandleFunc("GET /events", s.events)
	s.mux.HandleFunc("POST /rollouts/{name}/actions/{verb}", s.action)
	return s, nil
}

// Start runs the informers (one watch per resource) until ctx ends and
// returns once their caches are filled.
func (s *Server) Start(ctx context.Context) error { return s.hub.run(ctx) }

// Handler serves the pages, /events and the actions to the requests the
// Host and session checks let through (auth.go).
func (s *Server) Handler() http.Handler { return s.guard(s.mux, hostRule{}) }

// Serve starts the server and serves on ln until ctx ends.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	if err := s.Start(ctx); err != nil {
		ln.Close()
		return err
	}
	srv := &http.Server{Handler: s.guard(s.mux, listenRule(ln.Addr())), ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// pageData is what the layout needs around a page's main section.
type pageData struct {
	Title, Topic string
	Crumbs       []link
	Main         template.HTML
	// Style is the style sheet, inlined: the first paint waits for no
	// second request.
	Style template.CSS
}

// page renders a page: whole, or its main section alone for the script's
// live refresh (header X-Nodewise-Fragment).
func (s *Server) page(build func(r *http.Request) (pageData, string, any, int)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.hub.synced() {
			http.Error(w, "the dashboard is still listing NodeRollouts and RevisionMigrations; retry in a moment", http.StatusServiceUnavailable)
			return
		}
		pd, name, data, code := build(r)
		var main bytes.Buffer
		if err := s.tmpl.ExecuteTemplate(&main, name, data); err != nil {
			s.cfg.Log.Error("rendering a page", zap.String("page", name), zap.Error(err))
			http.Error(w, "rendering the page failed: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'")
		w.WriteHeader(code)
		if r.Header.Get("X-Nodewise-Fragment") != "" {
			_, _ = w.Write(main.Bytes())
			return
		}
		pd.Main = template.HTML(main.String()) // produced by html/template above
		pd.Style = s.style
		if err := s.tmpl.ExecuteTemplate(w, "layout.html", pd); err != nil {
			s.cfg.Log.Error("rendering the layout", zap.Error(err))
		}
	}
}

type notFound struct{ What string }

func (s *Server) listPage(*http.Request) (pageData, string, any, int) {
	p := buildList(s.hub.allRollouts(), s.hub.allMigrations(), s.cfg.Now())
	p.HasMigrations, p.MigrationsListed = s.hub.migrations != nil, s.hub.migrationsListed()
	p.HasClusters, p.HasFreshness = s.cfg.Clusters != nil, s.cfg.Freshness != nil
	return pageData{Title: "nodewise", Topic: "*"}, "list.html", p, http.StatusOK
}

type rolloutData struct {
	rolloutPage
	Actions bool
	// Stream names the page's own event stream ("" for none).
	Stream string
}

func (s *Server) rolloutPage(r *http.Request) (pageData, string, any, int) {
	name := r.PathValue("name")
	pd := pageData{Title: "NodeRollout " + name, Topic: kindRollout + "/" + name, Crumbs: []link{{"NodeRollout " + name, ""}}}
	q, err := parseFleetQuery(r.URL.Query())
	if err != nil {
		return pd, "badquery.html", err.Error(), http.StatusBadRequest
	}
	// Subscribed before the rollout is read: every change after the read
	// reaches the page's stream.
	t := &tab{rollout: name, q: q, actions: !s.cfg.ReadOnly, sub: s.hub.subscribe(), served: time.Now()}
	d, ok := s.tabData(t)
	if !ok {
		t.sub.close()
		return pd, "notfound.html", notFound{"NodeRollout " + name}, http.StatusNotFound
	}
	if t.sent, err = s.view(d); err != nil {
		t.sub.close()
		return pd, "rollout.html", d, http.StatusOK // the page's own rendering says what failed
	}
	d.Stream = s.tabs.add(t)
	return pd, "rollout.html", d, http.StatusOK
}

func (s *Server) nodePage(r *http.Request) (pageData, string, any, int) {
	name, node := r.PathValue("name"), r.PathValue("node")
	pd := pageData{Title: node + " in " + name, Topic: kindRollout + "/" + name,
		Crumbs: []link{{"NodeRollout " + name, "/rollouts/" + name}, {node, ""}}}
	nr := s.hub.rollout(name)
	if nr == nil {
		return pd, "notfound.html", notFound{"NodeRollout " + name}, http.StatusNotFound
	}
	n := findNode(nr, node)
	if n == nil {
		return pd, "notfound.html", notFound{"node " + node + " in NodeRollout " + name}, http.StatusNotFound
	}
	p := buildNode(nr, n, s.cfg.GrafanaURL, s.cfg.Now())
	p.Plots = s.nodePlots(r.Context(), nr.Name, n)
	return pd, "node.html", p, http.StatusOK
}

func (s *Server) migrationPage(r *http.Request) (pageData, string, any, int) {
	name := r.PathValue("name")
	pd := pageData{Title: "RevisionMigration " + name, Topic: kindMigration + "/" + name, Crumbs: []link{{"RevisionMigration " + name, ""}}}
	m := s.hub.migration(name)
	if m == nil {
		return pd, "notfound.html", notFound{"RevisionMigration " + name}, http.StatusNotFound
	}
	return pd, "migration.html", buildMigration(m), http.StatusOK
}

// heartbeat keeps idle event streams open through proxies.
const heartbeat = 15 * time.Second

// events is the server-sent event stream. A rollout page's own
// (?stream=ID) sends a "patch" of what changed on that page (stream.go);
// any other sends one "change" event per object that changed, its data
// "Kind/name". Every stream feeds from the hub's informers; none opens a
// watch of its own.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = fmt.Fprint(w, "retry: 2000\n\n")
	var sub *subscription
	var send func() bool // false ends the stream
	if id := r.URL.Query().Get("stream"); id != "" {
		t := s.tabs.claim(id)
		if t == nil {
			resync(w)
			fl.Flush()
			return
		}
		defer s.tabs.close(id)
		sub, send = t.sub, func() bool { return s.sendPatch(w, t) }
	} else {
		sub = s.hub.subscribe()
		defer sub.close()
		send = func() bool {
			for _, t := range sub.take() {
				_, _ = fmt.Fprintf(w, "event: change\ndata: %s\n\n", t)
			}
			return true
		}
	}
	fl.Flush()
	tick := time.NewTicker(heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
			_, _ = fmt.Fprint(w, ": ping\n\n")
		case <-sub.notify:
			if !send() {
				fl.Flush()
				return
			}
		}
		fl.Flush()
	}
}

// action applies pause, resume, abort or rollback to a NodeRollout with
// the dashboard's own credentials (the user's kubeconfig), as the CLI's
// commands of the same names do. The page asks for a confirmation first.
// Past the session check (guard), the request must carry X-Nodewise-Action
// (a header no cross-site form can send) and, when the browser names them,
// the dashboard's own origin and a same-origin fetch.
func (s *Server) action(w http.ResponseWriter, r *http.Request) {
	name, verb := r.PathValue("name"), r.PathValue("verb")
	reply := func(code int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
	}
	if s.cfg.ReadOnly {
		reply(http.StatusMethodNotAllowed, "this dashboard is read-only: run `nodewise "+verb+" "+name+"` or `nodewise dashboard` with your own credentials")
		return
	}
	if r.Header.Get("X-Nodewise-Action") == "" || !sameOrigin(r) {
		reply(http.StatusForbidden, "refused: actions come only from the dashboard's own page")
		return
	}
	patch, done, err := actionPatch(verb, s.cfg.Now())
	if err != nil {
		reply(http.StatusNotFound, err.Error())
		return
	}
	_, err = s.cfg.Rollouts.Patch(r.Context(), name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	switch {
	case apierrors.IsForbidden(err):
		reply(http.StatusForbidden, "forbidden: your credentials may not patch NodeRollout "+name+" ("+firstLine(err.Error())+")")
	case apierrors.IsNotFound(err):
		reply(http.StatusNotFound, "NodeRollout "+name+" no longer exists")
	case apierrors.IsInvalid(err):
		reply(http.StatusUnprocessableEntity, "refused by the API server: "+firstLine(err.Error()))
	case err != nil:
		reply(http.StatusBadGateway, verb+" "+name+": "+firstLine(err.Error()))
	default:
		s.cfg.Log.Info("dashboard action", zap.String("rollout", name), zap.String("action", verb))
		reply(http.StatusOK, "NodeRollout "+name+" "+done)
	}
}

func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	site := r.Header.Get("Sec-Fetch-Site")
	return (o == "" || o == "http://"+r.Host || o == "https://"+r.Host) && (site == "" || site == "same-origin")
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
