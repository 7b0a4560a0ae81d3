package remote

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	promapi "github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"go.uber.org/zap"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/wire"
)

// ErrBadQuery marks a PromQL query the server rejected as malformed
// (errorType bad_data). It is a configuration error, found at plan time.
var ErrBadQuery = errors.New("malformed PromQL query")

// PromQuery is one instant query and its threshold. Query may use $node, which
// is replaced by the node being judged.
type PromQuery struct {
	Name      string
	Query     string
	FailAbove bool // true: a sample above Threshold fails; false: below fails
	Threshold float64
	// NoData is what a result with nothing to compare (no series, or only
	// NaN samples) counts as; empty is Inconclusive.
	NoData v1alpha1.NoDataPolicy
}

// PrometheusGateConfig configures a PrometheusGate.
type PrometheusGateConfig struct {
	// Address is the server's base URL, such as
	// http://prometheus.monitoring.svc:9090. Its host must be one Addresses
	// allows.
	Address   string
	Addresses AddressPolicy
	Queries   []PromQuery
	// MaxConsecutiveErrors: evaluations in a row that could not query the
	// server before the gate fails (default 3).
	MaxConsecutiveErrors int
	// Timeout bounds each attempt (default 10s); RetryMax retries (default 2,
	// -1 for none) follow with exponential backoff between RetryWaitMin
	// (250ms) and RetryWaitMax (2s).
	Timeout      time.Duration
	RetryMax     int
	RetryWaitMin time.Duration
	RetryWaitMax time.Duration
	// CAFile and BearerTokenFile are optional, for a server behind TLS and auth.
	CAFile          string
	BearerTokenFile string
	Logger          *zap.Logger
}

// PrometheusGate evaluates instant queries against a Prometheus server. It
// implements ExternalGate.
type PrometheusGate struct {
	cfg PrometheusGateConfig
	*Prometheus
}

// Prometheus queries one Prometheus server's HTTP API with
// client_golang's API client, over the gates' retrying transport, within an
// AddressPolicy. The sidecar wing's built-in gates use it for queries of
// their own.
type Prometheus struct {
	base *url.URL
	api  promv1.API
}

var queryName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// NewPrometheusGate validates cfg and fills its defaults. It does not contact
// the server; Validate does.
func NewPrometheusGate(cfg PrometheusGateConfig) (*PrometheusGate, error) {
	c, err := NewPrometheus(cfg)
	if err != nil {
		return nil, err
	}
	if len(cfg.Queries) == 0 {
		return nil, errors.New("gates.prometheus.queries: at least one query is required")
	}
	seen := map[string]bool{}
	for i, q := range cfg.Queries {
		switch {
		case !queryName.MatchString(q.Name):
			return nil, fmt.Errorf("gates.prometheus.queries[%d].name %q: must be lower-case letters, digits and '-'", i, q.Name)
		case seen[q.Name]:
			return nil, fmt.Errorf("gates.prometheus.queries[%d].name %q: used twice", i, q.Name)
		case strings.TrimSpace(q.Query) == "":
			return nil, fmt.Errorf("gates.prometheus.queries[%s].query: must not be empty", q.Name)
		case math.IsNaN(q.Threshold) || math.IsInf(q.Threshold, 0):
			return nil, fmt.Errorf("gates.prometheus.queries[%s].threshold: must be a finite number", q.Name)
		}
		switch q.NoData {
		case "", v1alpha1.NoDataInconclusive, v1alpha1.NoDataPass, v1alpha1.NoDataFail:
		default:
			return nil, fmt.Errorf("gates.prometheus.queries[%s].noData %q: must be Inconclusive, Pass or Fail", q.Name, q.NoData)
		}
		seen[q.Name] = true
	}
	if cfg.MaxConsecutiveErrors == 0 {
		cfg.MaxConsecutiveErrors = 3
	}
	if cfg.MaxConsecutiveErrors < 1 {
		return nil, fmt.Errorf("gates.prometheus.maxConsecutiveErrors %d: must be at least 1", cfg.MaxConsecutiveErrors)
	}
	return &PrometheusGate{cfg: cfg, Prometheus: c}, nil
}

// NewPrometheus builds the client of cfg's server: it reads Address,
// Addresses, the timeout and retry settings, CAFile, BearerTokenFile and
// Logger, and ignores Queries and MaxConsecutiveErrors. An address the
// policy refuses is an error wrapping ErrAddressRefused.
func NewPrometheus(cfg PrometheusGateConfig) (*Prometheus, error) {
	u, err := url.Parse(cfg.Address)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("gates.prometheus.address %q: must be an http:// or https:// URL such as http://prometheus.monitoring.svc:9090", cfg.Address)
	}
	if err := cfg.Addresses.Check(u); err != nil {
		return nil, fmt.Errorf("gates.prometheus.address %q: %w", cfg.Address, err)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	o := retryOptions{Timeout: cfg.Timeout, RetryMax: cfg.RetryMax, RetryWaitMin: cfg.RetryWaitMin, RetryWaitMax: cfg.RetryWaitMax}
	o.defaults(10 * time.Second)
	if cfg.RetryMax < 0 {
		o.RetryMax = 0
	}
	if err := o.validate("gates.prometheus"); err != nil {
		return nil, err
	}
	var tlsConfig *tls.Config
	if cfg.CAFile != "" {
		pool, err := loadCA(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("gates.prometheus CA: %w", err)
		}
		tlsConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	hc := newRetryClient(o, tlsConfig, cfg.Logger)
	// A redirect is a request to another host: it must be one the policy
	// allows too, or the gate would forward its queries (and its token).
	hc.HTTPClient.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= 5 {
			return errors.New("stopped after 5 redirects")
		}
		if err := cfg.Addresses.Check(req.URL); err != nil {
			return fmt.Errorf("redirect to %s: %w", req.URL.Redacted(), err)
		}
		return nil
	}
	ac, err := promapi.NewClient(promapi.Config{
		Address: u.String(),
		Client:  &http.Client{Transport: &promTransport{retry: hc, tokenFile: cfg.BearerTokenFile}},
	})
	if err != nil {
		return nil, fmt.Errorf("gates.prometheus.address %q: %w", cfg.Address, err)
	}
	return &Prometheus{base: u, api: promv1.NewAPI(ac)}, nil
}

// promTransport carries the API client's requests through the retrying
// client: it adds the bearer token, read from its file on every request (a
// projected token rotates), and bounds what a response may bring.
type promTransport struct {
	retry     *retryablehttp.Client
	tokenFile string
}

// maxPromResponse bounds one query's response: a judge's query selects one
// node's series, so 16 MiB is far beyond any sane answer.
const maxPromResponse = 16 << 20

func (t *promTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rr, err := retryablehttp.FromRequest(req)
	if err != nil {
		return nil, fmt.Errorf("building the request: %w", err)
	}
	if t.tokenFile != "" {
		tok, err := readTokenFile(t.tokenFile)
		if err != nil {
			return nil, err
		}
		rr.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := t.retry.Do(rr)
	if err != nil {
		return nil, err
	}
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.LimitReader(resp.Body, maxPromResponse), resp.Body}
	return resp, nil
}

// Name implements ExternalGate.
func (g *PrometheusGate) Name() string { return "prometheus" }

// MaxConsecutiveErrors implements ExternalGate.
func (g *PrometheusGate) MaxConsecutiveErrors() int { return g.cfg.MaxConsecutiveErrors }

// Check runs every query for node. Each sample on the wrong side of its
// threshold is one failure. NaN samples (such as a success ratio with no
// requests) are left out; a query left with nothing to compare is what its
// NoData says: Inconclusive (wire.GateResult.NoData), Pass, or Fail. The first
// query that cannot be evaluated returns an error.
func (g *PrometheusGate) Check(ctx context.Context, node string) (wire.GateResult, error) {
	var r wire.GateResult
	for _, q := range g.cfg.Queries {
		samples, err := g.query(ctx, expand(q.Query, node))
		if err != nil {
			return wire.GateResult{}, fmt.Errorf("query %s: %w", q.Name, err)
		}
		compared := 0
		for _, s := range samples {
			if math.IsNaN(s.value) {
				continue
			}
			compared++
			if (q.FailAbove && s.value > q.Threshold) || (!q.FailAbove && s.value < q.Threshold) {
				side := "below"
				if q.FailAbove {
					side = "above"
				}
				r.Failures = append(r.Failures, fmt.Sprintf("query %s: %s%s is %s the threshold %s",
					q.Name, strconv.FormatFloat(s.value, 'g', 4, 64), s.labels, side, strconv.FormatFloat(q.Threshold, 'g', -1, 64)))
			}
		}
		if compared > 0 {
			continue
		}
		what := "no samples"
		if len(samples) > 0 {
			what = fmt.Sprintf("only NaN (%d samples)", len(samples))
		}
		msg := fmt.Sprintf("query %s returned %s for node %s, nothing to compare with the threshold", q.Name, what, node)
		switch q.NoData {
		case v1alpha1.NoDataPass:
		case v1alpha1.NoDataFail:
			r.Failures = append(r.Failures, msg+" (noData: Fail)")
		default:
			r.NoData = append(r.NoData, msg+" (noData: Inconclusive)")
		}
	}
	return r, nil
}

// Validate asks the server to evaluate every query once (with $node set to a
// placeholder), so a malformed query is an error at plan/apply time rather
// than a halted rollout later. A syntax error wraps ErrBadQuery with the
// server's message; an unreachable server is an error too.
//
// The main module does not import Prometheus' own PromQL parser: its module
// would raise this module's go directive to 1.26.7 and pull several hundred
// requirements into go.mod, so the server, which has the same parser, judges.
func (g *PrometheusGate) Validate(ctx context.Context) error {
	for _, q := range g.cfg.Queries {
		if _, err := g.query(ctx, expand(q.Query, "validation-node")); err != nil {
			return fmt.Errorf("gates.prometheus.queries[%s] %q: %w", q.Name, q.Query, err)
		}
	}
	return nil
}

func expand(q, node string) string { return strings.ReplaceAll(q, "$node", node) }

type promSample struct {
	labels string // {a="b",…}
	metric map[string]string
	value  float64
}

// PromSample is one sample of an instant query's result.
type PromSample struct {
	Labels map[string]string
	Value  float64
}

// Query evaluates q as an instant query at time at (the server's now when
// zero) and returns its samples; a scalar result is one sample without
// labels. A query the server rejects as malformed wraps ErrBadQuery.
func (c *Prometheus) Query(ctx context.Context, q string, at time.Time) ([]PromSample, error) {
	samples, err := c.queryAt(ctx, q, at)
	if err != nil {
		return nil, err
	}
	out := make([]PromSample, len(samples))
	for i, s := range samples {
		out[i] = PromSample{Labels: s.metric, Value: s.value}
	}
	return out, nil
}

func (c *Prometheus) query(ctx context.Context, q string) ([]promSample, error) {
	return c.queryAt(ctx, q, time.Time{})
}

// queryAt evaluates q at time at (the server's now when zero). A query the
// server rejects as malformed (bad_data) wraps ErrBadQuery.
func (c *Prometheus) queryAt(ctx context.Context, q string, at time.Time) ([]promSample, error) {
	val, _, _, err := c.api.Query(ctx, q, at) // a zero time is left out: the server's now
	if err != nil {
		var apiErr *promv1.Error
		if errors.As(err, &apiErr) && apiErr.Type == promv1.ErrBadData {
			return nil, fmt.Errorf("%w: %s", ErrBadQuery, apiErr.Msg)
		}
		return nil, fmt.Errorf("querying %s: %w", c.base.Redacted(), err)
	}
	switch v := val.(type) {
	case model.Vector:
		out := make([]promSample, 0, len(v))
		for _, s := range v {
			m := make(map[string]string, len(s.Metric))
			for k, lv := range s.Metric {
				m[string(k)] = string(lv)
			}
			out = append(out, promSample{labels: formatLabels(m), metric: m, value: float64(s.Value)})
		}
		return out, nil
	case *model.Scalar:
		return []promSample{{value: float64(v.Value)}}, nil
	default:
		return nil, fmt.Errorf("the query returns a %s; the gate needs an instant vector or a scalar", val.Type())
	}
}

func formatLabels(m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + strconv.Quote(m[k])
	}
	return "{" + strings.Join(parts, ",") + "}"
}
