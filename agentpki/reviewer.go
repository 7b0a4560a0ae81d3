package agentpki

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ReviewerConfig configures the agent's check of its callers' bearer tokens.
type ReviewerConfig struct {
	Kube kubernetes.Interface // as the agent's ServiceAccount, allowed to create TokenReviews (required)
	// Audience the tokens must be issued for (default DefaultAudience).
	Audience string
	// Allowed are the usernames (system:serviceaccount:<ns>:<name>) admitted
	// to every endpoint with a token for Audience (required: the orchestrator).
	Allowed []string
	// MetricsCallers are admitted to /metrics only, with any valid token of
	// theirs (such as a Prometheus ServiceAccount without RBAC).
	MetricsCallers []string
	// TTL is how long a verdict is cached per token (default 1m): the API
	// server sees one review per caller and minute, not one per request.
	TTL    time.Duration
	Logger *zap.Logger
	Now    func() time.Time
}

// Reviewer authenticates requests by TokenReview. It implements the node
// agent's Authenticator.
type Reviewer struct {
	cfg ReviewerConfig

	mu    sync.Mutex
	cache map[cacheKey]verdict
}

type cacheKey struct {
	digest  [sha256.Size]byte
	metrics bool
}

type verdict struct {
	err     error
	expires time.Time
}

// maxCached bounds the cache: past it the cache is dropped (a flood of bad
// tokens costs reviews, never memory).
const maxCached = 1024

// NewReviewer validates cfg and fills its defaults.
func NewReviewer(cfg ReviewerConfig) (*Reviewer, error) {
	if cfg.Kube == nil {
		return nil, errors.New("agentpki.ReviewerConfig: Kube is required")
	}
	if len(cfg.Allowed) == 0 {
		return nil, errors.New("agentpki.ReviewerConfig: Allowed is required (the orchestrator's ServiceAccount, system:serviceaccount:<namespace>:nodewise-orchestrator)")
	}
	for _, u := range append(slices.Clone(cfg.Allowed), cfg.MetricsCallers...) {
		if !strings.HasPrefix(u, "system:serviceaccount:") || strings.Count(u, ":") != 3 {
			return nil, fmt.Errorf("agentpki.ReviewerConfig: caller %q is not a ServiceAccount username (system:serviceaccount:<namespace>:<name>)", u)
		}
	}
	if cfg.Audience == "" {
		cfg.Audience = DefaultAudience
	}
	if cfg.TTL == 0 {
		cfg.TTL = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Reviewer{cfg: cfg, cache: map[cacheKey]verdict{}}, nil
}

// Authenticate admits the request's bearer token or says why not.
func (r *Reviewer) Authenticate(req *http.Request) error {
	tok, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
	if !ok || strings.TrimSpace(tok) == "" {
		return errors.New("no bearer token")
	}
	tok = strings.TrimSpace(tok)
	key := cacheKey{digest: sha256.Sum256([]byte(tok)), metrics: req.URL.Path == "/metrics"}
	now := r.cfg.Now()
	r.mu.Lock()
	v, hit := r.cache[key]
	r.mu.Unlock()
	if hit && now.Before(v.expires) {
		return v.err
	}
	err := r.review(req.Context(), tok, key.metrics)
	var transient reviewUnavailable
	if errors.As(err, &transient) {
		return err // not cached: the next request asks again
	}
	r.mu.Lock()
	if len(r.cache) >= maxCached {
		r.cache = map[cacheKey]verdict{}
	}
	r.cache[key] = verdict{err: err, expires: now.Add(r.cfg.TTL)}
	r.mu.Unlock()
	return err
}

type reviewUnavailable struct{ error }

func (e reviewUnavailable) Unwrap() error { return e.error }

func (r *Reviewer) review(ctx context.Context, tok string, metrics bool) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	st, err := r.tokenReview(ctx, tok, []string{r.cfg.Audience})
	if err != nil {
		return err
	}
	if st.Authenticated && slices.Contains(st.Audiences, r.cfg.Audience) && slices.Contains(r.cfg.Allowed, st.User.Username) {
		return nil
	}
	if metrics && len(r.cfg.MetricsCallers) > 0 {
		// A metrics reader's ordinary token (the API server's audience).
		mst, err := r.tokenReview(ctx, tok, nil)
		if err != nil {
			return err
		}
		if mst.Authenticated && slices.Contains(r.cfg.MetricsCallers, mst.User.Username) {
			return nil
		}
	}
	if !st.Authenticated {
		return fmt.Errorf("token not authenticated for audience %s: %s", r.cfg.Audience, st.Error)
	}
	return fmt.Errorf("caller %s is not allowed", st.User.Username)
}

func (r *Reviewer) tokenReview(ctx context.Context, tok string, audiences []string) (authnv1.TokenReviewStatus, error) {
	got, err := r.cfg.Kube.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: tok, Audiences: audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		r.cfg.Logger.Warn("TokenReview failed; refusing the caller", zap.Error(err))
		return authnv1.TokenReviewStatus{}, reviewUnavailable{fmt.Errorf("reviewing the token: %w", err)}
	}
	return got.Status, nil
}
