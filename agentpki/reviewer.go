package agentpki

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
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
//
// Anyone who reaches the agent can send a token, so a review of a token the
// Reviewer has not admitted before is rationed, per source address and in
// all (a request over the ration is refused with a RetryAfter, never queued),
// and the admitted tokens are kept apart from the refused ones: a flood of
// random tokens can neither evict the orchestrator's verdict nor delay its
// next review. A new token is first checked against the ServiceAccount
// issuer's public keys (issuerKeys): one the API server signed for an
// allowed caller (its sub and aud claims), current, is reviewed under a
// ration of its own that no other pod's token can spend, so a flood of
// unknown tokens never starves a new leader's first token; one signed for
// another caller, or naming an issuer key with a wrong signature, is refused
// without a review. A token the keys cannot tell (not a JWT, another
// issuer, the keys unreadable) is rationed with the unknown ones. Give it a
// client of its own (ReviewClient), so the reviews do not queue behind the
// agent's other API calls, nor they behind the reviews.
type Reviewer struct {
	cfg ReviewerConfig

	mu       sync.Mutex
	admitted map[cacheKey]time.Time // tokens admitted, and when their verdict expires
	refused  map[cacheKey]verdict
	all      *rate.Limiter            // reviews of unknown tokens, every source together
	sources  map[string]*rate.Limiter // the same per source address
	signed   *rate.Limiter            // reviews of new tokens the issuer signed for an allowed caller
	keys     *issuerKeys
}

type cacheKey struct {
	digest  [sha256.Size]byte
	metrics bool
}

type verdict struct {
	err     error
	expires time.Time
}

// The bounds of the Reviewer's memory and of the reviews a caller without
// an admitted token can cause.
const (
	// maxCached bounds the refused verdicts (and the sources rationed):
	// past it they are dropped whole. Admitted verdicts are never dropped
	// with them.
	maxCached = 1024
	// maxAdmitted bounds the admitted tokens; only the allowed callers'
	// tokens get here (a few per caller and rotation).
	maxAdmitted = 64
	// Reviews of tokens not admitted before: per source address, and in all;
	// of new tokens the issuer signed for an allowed caller, apart.
	unknownPerSource, unknownPerSourceBurst = 1, 3
	unknownInAll, unknownInAllBurst         = 5, 10
	signedInAll, signedInAllBurst           = 5, 10
	// ReviewQPS and ReviewBurst are ReviewClient's client-side limits:
	// above twice both rations (a /metrics token may take two reviews), so
	// an admitted token's review never waits behind them.
	ReviewQPS, ReviewBurst = 25, 50
)

// ReviewClient is a client of the API for the Reviewer alone, from the
// agent's rest config, with its own client-side limits (ReviewQPS).
func ReviewClient(rc *rest.Config) (kubernetes.Interface, error) {
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst, rc.RateLimiter = ReviewQPS, ReviewBurst, nil
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("building the TokenReview client: %w", err)
	}
	return c, nil
}

// RateLimited is the refusal of a request whose token would need a review
// beyond the ration of unknown tokens. The agent answers it with 429 and
// Retry-After.
type RateLimited struct{ after time.Duration }

func (e RateLimited) Error() string {
	return fmt.Sprintf("too many unknown tokens; retry after %s", e.after)
}

// RetryAfter is how long the caller should wait.
func (e RateLimited) RetryAfter() time.Duration { return e.after }

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
	return &Reviewer{cfg: cfg, admitted: map[cacheKey]time.Time{}, refused: map[cacheKey]verdict{},
		all: rate.NewLimiter(unknownInAll, unknownInAllBurst), sources: map[string]*rate.Limiter{},
		signed: rate.NewLimiter(signedInAll, signedInAllBurst), keys: &issuerKeys{kube: cfg.Kube}}, nil
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
	decided, again, err := r.cached(key, now)
	if decided {
		return err
	}
	signed, claims := signedUnknown, tokenClaims{}
	if !again {
		signed, claims = r.keys.check(req.Context(), tok, now)
	}
	switch {
	case again: // admitted before: reviewed again at once, never rationed
	case signed == signedForged:
		return errors.New("token names a key of the ServiceAccount issuer but is not signed with it")
	case signed == signedGood && !claims.valid(now):
		return errors.New("token expired")
	case signed == signedGood && !r.mayCall(claims, key.metrics) && slices.Contains(r.cfg.Allowed, claims.Sub):
		return fmt.Errorf("token not issued for audience %s", r.cfg.Audience)
	case signed == signedGood && !r.mayCall(claims, key.metrics):
		return fmt.Errorf("caller %s is not allowed", claims.Sub)
	}
	if !again {
		if err := r.ration(now, req.RemoteAddr, signed == signedGood); err != nil {
			return err
		}
	}
	err = r.review(req.Context(), tok, key.metrics)
	var transient reviewUnavailable
	if errors.As(err, &transient) {
		return err // not cached: the next request asks again
	}
	r.remember(key, err, now)
	return err
}

// cached answers from the verdicts in memory; decided is false when the
// token is to be reviewed, again when it was admitted before (its verdict
// expired: it is reviewed again at once).
func (r *Reviewer) cached(key cacheKey, now time.Time) (decided, again bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if expires, ok := r.admitted[key]; ok {
		return now.Before(expires), true, nil
	}
	if v, ok := r.refused[key]; ok && now.Before(v.expires) {
		return true, false, v.err
	}
	return false, false, nil
}

// mayCall: the claims of a token the issuer signed name a caller allowed
// here (for /metrics, a metrics caller with any audience too).
func (r *Reviewer) mayCall(c tokenClaims, metrics bool) bool {
	return (c.hasAudience(r.cfg.Audience) && slices.Contains(r.cfg.Allowed, c.Sub)) || (metrics && slices.Contains(r.cfg.MetricsCallers, c.Sub))
}

// ration refuses a review over its ration: a token the issuer signed for an
// allowed caller spends its own; any other new token the unknown tokens',
// per source address and in all. A token admitted before is never rationed.
func (r *Reviewer) ration(now time.Time, remote string, signed bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if signed {
		if !r.signed.AllowN(now, 1) {
			return RateLimited{after: time.Second}
		}
		return nil
	}
	source, _, splitErr := net.SplitHostPort(remote)
	if splitErr != nil {
		source = remote
	}
	lim, ok := r.sources[source]
	if !ok {
		if len(r.sources) >= maxCached {
			r.sources = map[string]*rate.Limiter{}
		}
		lim = rate.NewLimiter(unknownPerSource, unknownPerSourceBurst)
		r.sources[source] = lim
	}
	if !lim.AllowN(now, 1) || !r.all.AllowN(now, 1) {
		return RateLimited{after: time.Second}
	}
	return nil
}

// remember keeps a review's verdict: an admitted token with the admitted
// ones (the soonest to expire leaves when they are full), a refused one
// with the refused.
func (r *Reviewer) remember(key cacheKey, err error, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		delete(r.admitted, key)
		if len(r.refused) >= maxCached {
			r.refused = map[cacheKey]verdict{}
		}
		r.refused[key] = verdict{err: err, expires: now.Add(r.cfg.TTL)}
		return
	}
	delete(r.refused, key)
	if _, ok := r.admitted[key]; !ok && len(r.admitted) >= maxAdmitted {
		var oldest cacheKey
		first := true
		for k, exp := range r.admitted {
			if first || exp.Before(r.admitted[oldest]) {
				oldest, first = k, false
			}
		}
		delete(r.admitted, oldest)
	}
	r.admitted[key] = now.Add(r.cfg.TTL)
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
