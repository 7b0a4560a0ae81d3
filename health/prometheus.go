package health

import (
	"context"
	"crypto/tls"
	"encoding/json"
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
	"go.uber.org/zap"

	"github.com/nodewise/nodewise/api/v1alpha1"
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
	*PrometheusClient
}

// PrometheusClient queries one Prometheus server's HTTP API through the
// gates' retrying client, within an AddressPolicy. The sidecar wing's
// built-in gates use it for queries of their own.
type PrometheusClient struct {
	base      *url.URL
	http      *retryablehttp.Client
	tokenFile string
}

var queryName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// NewPrometheusGate validates cfg and fills its defaults. It does not contact
// the server; Validate does.
func NewPrometheusGate(cfg PrometheusGateConfig) (*PrometheusGate, error) {
	c, err := NewPrometheusClient(cfg)
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
	return &PrometheusGate{cfg: cfg, PrometheusClient: c}, nil
}

// NewPrometheusClient builds the client of cfg's server: it reads Address,
// Addresses, the timeout and retry settings, CAFile, BearerTokenFile and
// Logger, and ignores Queries and MaxConsecutiveErrors. An address the
// policy refuses is an error wrapping ErrAddressRefused.
func NewPrometheusClient(cfg PrometheusGateConfig) (*PrometheusClient, error) {
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
	return &PrometheusClient{base: u, http: hc, tokenFile: cfg.BearerTokenFile}, nil
}

// Name implements ExternalGate.
func (g *PrometheusGate) Name() string { return "prometheus" }

// MaxConsecutiveErrors implements ExternalGate.
func (g *PrometheusGate) MaxConsecutiveErrors() int { return g.cfg.MaxConsecutiveErrors }

// Check runs every query for node. Each sample on the wrong side of its
// threshold is one failure. NaN samples (such as a success ratio with no
// requests) are left out; a query left with nothing to compare is what its
// NoData says: Inconclusive (GateResult.NoData), Pass, or Fail. The first
// query that cannot be evaluated returns an error.
func (g *PrometheusGate) Check(ctx context.Context, node string) (GateResult, error) {
	var r GateResult
	for _, q := range g.cfg.Queries {
		samples, err := g.query(ctx, expand(q.Query, node))
		if err != nil {
			return GateResult{}, fmt.Errorf("query %s: %w", q.Name, err)
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
func (c *PrometheusClient) Query(ctx context.Context, q string, at time.Time) ([]PromSample, error) {
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

// promResponse is the part of /api/v1/query's JSON the gate reads.
type promResponse struct {
	Status    string `json:"status"`
	ErrorType string `json:"errorType"`
	Error     string `json:"error"`
	Data      struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	} `json:"data"`
}

func (c *PrometheusClient) query(ctx context.Context, q string) ([]promSample, error) {
	return c.queryAt(ctx, q, time.Time{})
}

func (c *PrometheusClient) queryAt(ctx context.Context, q string, at time.Time) ([]promSample, error) {
	u := c.base.JoinPath("/api/v1/query")
	v := url.Values{"query": {q}}
	if !at.IsZero() {
		v.Set("time", strconv.FormatFloat(float64(at.UnixMilli())/1000, 'f', 3, 64))
	}
	u.RawQuery = v.Encode()
	req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("building the request: %w", err)
	}
	if c.tokenFile != "" {
		tok, err := readTokenFile(c.tokenFile)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", c.base.Redacted(), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the response: %w", err)
	}
	var pr promResponse
	if err := json.Unmarshal(body, &pr); err != nil {
		return nil, fmt.Errorf("%s from %s, not a Prometheus API response: %.200s", resp.Status, c.base.Redacted(), body)
	}
	if pr.Status != "success" {
		if pr.ErrorType == "bad_data" {
			return nil, fmt.Errorf("%w: %s", ErrBadQuery, pr.Error)
		}
		return nil, fmt.Errorf("%s: %s: %s", resp.Status, pr.ErrorType, pr.Error)
	}
	switch pr.Data.ResultType {
	case "vector":
		var v []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(pr.Data.Result, &v); err != nil {
			return nil, fmt.Errorf("decoding the vector: %w", err)
		}
		out := make([]promSample, 0, len(v))
		for _, s := range v {
			f, err := sampleValue(s.Value)
			if err != nil {
				return nil, err
			}
			out = append(out, promSample{labels: formatLabels(s.Metric), metric: s.Metric, value: f})
		}
		return out, nil
	case "scalar":
		var s [2]any
		if err := json.Unmarshal(pr.Data.Result, &s); err != nil {
			return nil, fmt.Errorf("decoding the scalar: %w", err)
		}
		f, err := sampleValue(s)
		if err != nil {
			return nil, err
		}
		return []promSample{{value: f}}, nil
	default:
		return nil, fmt.Errorf("the query returns a %s; the gate needs an instant vector or a scalar", pr.Data.ResultType)
	}
}

func sampleValue(v [2]any) (float64, error) {
	s, ok := v[1].(string)
	if !ok {
		return 0, fmt.Errorf("sample value %v is not a string", v[1])
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("sample value %q: %w", s, err)
	}
	return f, nil
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
