package remote

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-cleanhttp"
	"github.com/hashicorp/go-retryablehttp"
	"go.uber.org/zap"
)

// retryOptions are the retry and timeout settings shared by the agent client
// and the Prometheus gate.
type retryOptions struct {
	Timeout      time.Duration // per attempt
	RetryMax     int
	RetryWaitMin time.Duration
	RetryWaitMax time.Duration
}

func (o *retryOptions) defaults(timeout time.Duration) {
	if o.Timeout == 0 {
		o.Timeout = timeout
	}
	if o.RetryMax == 0 {
		o.RetryMax = 2
	}
	if o.RetryWaitMin == 0 {
		o.RetryWaitMin = 250 * time.Millisecond
	}
	if o.RetryWaitMax == 0 {
		o.RetryWaitMax = 2 * time.Second
	}
}

func (o retryOptions) validate(prefix string) error {
	switch {
	case o.Timeout < 0:
		return fmt.Errorf("%s.Timeout %s: must be positive", prefix, o.Timeout)
	case o.RetryMax < 0:
		return fmt.Errorf("%s.RetryMax %d: must not be negative", prefix, o.RetryMax)
	case o.RetryWaitMin < 0 || o.RetryWaitMax < o.RetryWaitMin:
		return fmt.Errorf("%s.RetryWaitMin %s / RetryWaitMax %s: need 0 ≤ min ≤ max", prefix, o.RetryWaitMin, o.RetryWaitMax)
	}
	return nil
}

// newRetryClient builds a go-retryablehttp client: exponential backoff with
// jitter between RetryWaitMin and RetryWaitMax, retries on connection errors,
// 5xx and 429, a timeout on every attempt, and its log at debug level.
func newRetryClient(o retryOptions, tlsConfig *tls.Config, log *zap.Logger) *retryablehttp.Client {
	hc := cleanhttp.DefaultPooledClient()
	hc.Timeout = o.Timeout
	if tlsConfig != nil {
		hc.Transport.(*http.Transport).TLSClientConfig = tlsConfig
	}
	c := retryablehttp.NewClient()
	c.HTTPClient = hc
	c.RetryMax = o.RetryMax
	c.RetryWaitMin = o.RetryWaitMin
	c.RetryWaitMax = o.RetryWaitMax
	c.Backoff = retryablehttp.DefaultBackoff
	c.ErrorHandler = retryablehttp.PassthroughErrorHandler
	c.Logger = zapLeveled{log}
	return c
}

// loadCA reads a PEM bundle into a pool.
func loadCA(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA bundle %s holds no PEM certificate", path)
	}
	return pool, nil
}

// zapLeveled adapts zap to retryablehttp.LeveledLogger; the retry mechanics are debug.
type zapLeveled struct{ l *zap.Logger }

func (z zapLeveled) Error(msg string, kv ...any) { z.l.Sugar().Debugw(msg, kv...) }
func (z zapLeveled) Info(msg string, kv ...any)  { z.l.Sugar().Debugw(msg, kv...) }
func (z zapLeveled) Debug(msg string, kv ...any) { z.l.Sugar().Debugw(msg, kv...) }
func (z zapLeveled) Warn(msg string, kv ...any)  { z.l.Sugar().Debugw(msg, kv...) }

// caFile is a CA bundle on disk that is read again when it changes, such as
// a mounted ConfigMap the kubelet updates when the CA rotates. A change that
// does not parse keeps the last good pool (and is logged once per change).
type caFile struct {
	path string
	log  *zap.Logger

	mu      sync.Mutex
	pool    *x509.CertPool
	modTime time.Time
	size    int64
}

// watchCA loads path now (an error if it is unreadable or holds no
// certificate) and returns the pool it keeps current.
func watchCA(path string, log *zap.Logger) (func() *x509.CertPool, error) {
	f := &caFile{path: path, log: log}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("reading CA bundle: %w", err)
	}
	if f.pool, err = loadCA(path); err != nil {
		return nil, err
	}
	f.modTime, f.size = fi.ModTime(), fi.Size()
	return f.current, nil
}

func (f *caFile) current() *x509.CertPool {
	f.mu.Lock()
	defer f.mu.Unlock()
	fi, err := os.Stat(f.path)
	if err != nil || (fi.ModTime().Equal(f.modTime) && fi.Size() == f.size) {
		return f.pool
	}
	f.modTime, f.size = fi.ModTime(), fi.Size()
	pool, err := loadCA(f.path)
	if err != nil {
		f.log.Warn("the changed CA bundle does not load; keeping the previous one", zap.String("path", f.path), zap.Error(err))
		return f.pool
	}
	f.log.Info("CA bundle changed; trusting the new one", zap.String("path", f.path))
	f.pool = pool
	return pool
}
