package remote

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"go.uber.org/zap"

	"github.com/nodewise/nodewise/health/wire"
)

// ErrAgentUnavailable wraps every reason the judge could not get a snapshot
// from a node's agent. The judge fails closed on it.
var ErrAgentUnavailable = errors.New("node agent unavailable")

// AgentConfig configures the client the orchestrator uses to read node
// agents' snapshots. The credential is the one the node agent documents
// (package nodeagent, docs/nodeagent.md): TLS with the agent's CA, and a
// bearer token read from a file shared with the agents.
type AgentConfig struct {
	// CAFile is the PEM bundle that signs the agents' serving certificates
	// (required unless RootCAs). It is read again when it changes (a mounted
	// ConfigMap the kubelet updates when the CA rotates), before a new
	// connection; a change that does not load keeps the previous bundle.
	CAFile string
	// RootCAs, when set, replaces CAFile: it is asked for the current pool on
	// every new connection, so a CA the orchestrator rotates in memory
	// (agentpki.Signer.Pool) is trusted at once. A nil pool fails the connection.
	RootCAs func() *x509.CertPool
	// TokenFile holds the bearer token (required). It is read on every
	// request, so a rotated Secret takes effect at once.
	TokenFile string
	// URLFor returns the base URL of the agent on a node, such as
	// https://10.0.0.7:9443 (default: https://<node>:9443).
	URLFor func(ctx context.Context, node string) (string, error)
	// ServerName is the name to verify in the agents' certificates when they
	// are addressed by IP (default: the host in the URL).
	ServerName string
	// VerifyNodeName verifies, in the TLS handshake and before the token is
	// sent, that the agent's certificate names the node asked for (the
	// DNS name agentpki issues), not only the address dialled: a node writes
	// its own addresses, so an address alone does not say which node
	// answers. It replaces ServerName.
	VerifyNodeName bool
	// Timeout bounds each attempt (default 5s); RetryMax retries follow with
	// exponential backoff between RetryWaitMin (250ms) and RetryWaitMax (2s);
	// RetryMax 0 means the default, 2, and -1 means no retries.
	Timeout      time.Duration
	RetryMax     int
	RetryWaitMin time.Duration
	RetryWaitMax time.Duration
	Logger       *zap.Logger
}

// Agent reads snapshots from node agents over HTTPS. It implements
// SnapshotSource.
type Agent struct {
	cfg  AgentConfig
	http *retryablehttp.Client
}

// NewAgent validates cfg, fills defaults and loads the CA.
func NewAgent(cfg AgentConfig) (*Agent, error) {
	if cfg.CAFile == "" && cfg.RootCAs == nil {
		return nil, errors.New("remote.AgentConfig.CAFile is required: the PEM bundle that signs the node agents' certificates")
	}
	if cfg.TokenFile == "" {
		return nil, errors.New("remote.AgentConfig.TokenFile is required: the bearer token the node agents accept")
	}
	if _, err := readTokenFile(cfg.TokenFile); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.VerifyNodeName && cfg.ServerName != "" {
		return nil, errors.New("remote.AgentConfig: VerifyNodeName and ServerName exclude each other (each node's name is verified)")
	}
	if cfg.RootCAs == nil {
		roots, err := watchCA(cfg.CAFile, cfg.Logger)
		if err != nil {
			return nil, fmt.Errorf("remote.AgentConfig.CAFile: %w", err)
		}
		cfg.RootCAs = roots
	}
	if cfg.URLFor == nil {
		cfg.URLFor = func(_ context.Context, node string) (string, error) { return "https://" + node + ":9443", nil }
	}
	o := retryOptions{Timeout: cfg.Timeout, RetryMax: cfg.RetryMax, RetryWaitMin: cfg.RetryWaitMin, RetryWaitMax: cfg.RetryWaitMax}
	if cfg.RetryMax < 0 {
		o.RetryMax = 0 // explicit "no retries"
	}
	o.defaults(5 * time.Second)
	if cfg.RetryMax < 0 {
		o.RetryMax = 0
	}
	if err := o.validate("remote.AgentConfig"); err != nil {
		return nil, err
	}
	tlsConfig := &tls.Config{ServerName: cfg.ServerName, MinVersion: tls.VersionTLS12}
	hc := newRetryClient(o, tlsConfig, cfg.Logger)
	hc.HTTPClient.Transport.(*http.Transport).DialTLSContext = dialTLSWith(cfg.RootCAs, tlsConfig)
	return &Agent{cfg: cfg, http: hc}, nil
}

// dialAddrKey carries, in a request's context, the address to dial when the
// request's URL names the node (VerifyNodeName): the transport then pools
// connections per node, and the handshake verifies the node's name.
type dialAddrKey struct{}

// dialTLSWith dials TLS verifying the peer against the pool roots returns at
// that moment, for the name in base (or the host in addr, dialled at the
// context's dialAddrKey when set).
func dialTLSWith(roots func() *x509.CertPool, base *tls.Config) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		pool := roots()
		if pool == nil {
			return nil, errors.New("the agents' CA is not loaded yet")
		}
		cfg := base.Clone()
		cfg.RootCAs = pool
		if cfg.ServerName == "" {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			cfg.ServerName = host
		}
		dial := addr
		if at, ok := ctx.Value(dialAddrKey{}).(string); ok {
			dial = at
		}
		raw, err := d.DialContext(ctx, network, dial)
		if err != nil {
			return nil, err
		}
		conn := tls.Client(raw, cfg)
		if err := conn.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		return conn, nil
	}
}

func readTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading agent token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("agent token file %s is empty", path)
	}
	return tok, nil
}

// Snapshot fetches the node's current snapshot. Every failure wraps
// ErrAgentUnavailable and says what went wrong.
func (c *Agent) Snapshot(ctx context.Context, node string) (wire.Snapshot, error) {
	var s wire.Snapshot
	if err := c.get(ctx, node, "/v1/snapshot", &s); err != nil {
		return wire.Snapshot{}, err
	}
	if s.Node != node {
		return wire.Snapshot{}, fmt.Errorf("%w: node %s: the agent answered for node %q", ErrAgentUnavailable, node, s.Node)
	}
	if s.Time.IsZero() || s.StartTime.IsZero() {
		return wire.Snapshot{}, fmt.Errorf("%w: node %s: the snapshot has no time or start time", ErrAgentUnavailable, node)
	}
	return s, nil
}

// History fetches the snapshots the node's agent kept since a time
// (HistorySource). An agent that serves no history (an older one: 404)
// wraps ErrNoHistory; every other failure wraps ErrAgentUnavailable. A
// snapshot of another node or agent run than the answer's is an error.
func (c *Agent) History(ctx context.Context, node string, since time.Time) (wire.History, error) {
	var h wire.History
	path := "/v1/history?since=" + url.QueryEscape(since.UTC().Format(time.RFC3339Nano))
	if err := c.get(ctx, node, path, &h); err != nil {
		return wire.History{}, err
	}
	if h.Node != node || h.Now.IsZero() || h.StartTime.IsZero() {
		return wire.History{}, fmt.Errorf("%w: node %s: the history is of node %q, or has no time or start time", ErrAgentUnavailable, node, h.Node)
	}
	for _, s := range h.Snapshots {
		if s.Node != node || !s.StartTime.Equal(h.StartTime) || s.Time.IsZero() {
			return wire.History{}, fmt.Errorf("%w: node %s: a history snapshot of node %q started %s, not of this agent run", ErrAgentUnavailable, node, s.Node, s.StartTime.UTC().Format(time.RFC3339))
		}
	}
	return h, nil
}

// get fetches path from the node's agent and decodes its JSON into out.
func (c *Agent) get(ctx context.Context, node, path string, out any) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w: node %s: %s", ErrAgentUnavailable, node, fmt.Sprintf(format, args...))
	}
	base, err := c.cfg.URLFor(ctx, node)
	if err != nil {
		return fail("finding the agent: %v", err)
	}
	tok, err := readTokenFile(c.cfg.TokenFile)
	if err != nil {
		return fail("%v", err)
	}
	target := strings.TrimSuffix(base, "/") + path
	if c.cfg.VerifyNodeName {
		u, err := url.Parse(target)
		if err != nil || u.Port() == "" {
			return fail("the agent's URL %q has no port", base)
		}
		ctx = context.WithValue(ctx, dialAddrKey{}, u.Host)
		u.Host = net.JoinHostPort(node, u.Port())
		target = u.String()
	}
	req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return fail("building the request: %v", err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return fail("GET %s%s: %v", base, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound && strings.HasPrefix(path, "/v1/history") {
		return fmt.Errorf("%w: node %s: GET %s/v1/history: %s", wire.ErrNoHistory, node, base, resp.Status)
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		hint := ""
		if resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden {
			hint = " (the agent rejected the token: check the token file matches the agents' Secret)"
		}
		return fail("GET %s%s: %s%s: %s", base, path, resp.Status, hint, strings.TrimSpace(string(body)))
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(out); err != nil {
		return fail("decoding the answer to %s: %v", path, err)
	}
	return nil
}

// CNI asks the node's agent for istio-cni's health (GET /v1/cni), with the
// plugin version expected ("" to compare none). Every failure to get an
// answer wraps ErrAgentUnavailable; the checks' own failures are in the
// answer.
func (c *Agent) CNI(ctx context.Context, node, version string) (wire.CNIHealth, error) {
	path := "/v1/cni"
	if version != "" {
		path += "?version=" + url.QueryEscape(version)
	}
	var h wire.CNIHealth
	if err := c.get(ctx, node, path, &h); err != nil {
		return wire.CNIHealth{}, err
	}
	if h.Node != node {
		return wire.CNIHealth{}, fmt.Errorf("%w: node %s: the agent answered for node %q", ErrAgentUnavailable, node, h.Node)
	}
	return h, nil
}
