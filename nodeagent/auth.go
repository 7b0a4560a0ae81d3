package nodeagent

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Authenticator admits a request's caller or says why not.
type Authenticator interface {
	Authenticate(r *http.Request) error
}

// tokenAuth checks the bearer token against the token file, re-reading the
// file when its modification time changes.
type tokenAuth struct {
	path string
	log  *zap.Logger

	mu     sync.Mutex
	mtime  time.Time
	digest [sha256.Size]byte
}

func newTokenAuth(path string, log *zap.Logger) (*tokenAuth, error) {
	a := &tokenAuth{path: path, log: log}
	if err := a.reload(); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *tokenAuth) reload() error {
	fi, err := os.Stat(a.path)
	if err != nil {
		return err
	}
	tok, err := readToken(a.path)
	if err != nil {
		return err
	}
	a.mtime = fi.ModTime()
	a.digest = sha256.Sum256([]byte(tok))
	return nil
}

func (a *tokenAuth) current() [sha256.Size]byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	if fi, err := os.Stat(a.path); err == nil && !fi.ModTime().Equal(a.mtime) {
		if err := a.reload(); err != nil {
			// Keep the old token rather than locking everyone out.
			a.log.Warn("token file changed but cannot be read; keeping the previous token", zap.Error(err))
		}
	}
	return a.digest
}

// Authenticate compares the bearer token with the token file's.
func (a *tokenAuth) Authenticate(r *http.Request) error {
	h := r.Header.Get("Authorization")
	tok, found := strings.CutPrefix(h, "Bearer ")
	if !found {
		return errors.New("no bearer token")
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	want := a.current()
	if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
		return errors.New("wrong token")
	}
	return nil
}

// authenticated serves next only to callers auth admits.
func authenticated(auth Authenticator, log *zap.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := auth.Authenticate(r); err != nil {
			var limited interface{ RetryAfter() time.Duration }
			if errors.As(err, &limited) {
				// Refused before any check: too many unknown tokens.
				w.Header().Set("Retry-After", strconv.Itoa(max(1, int(limited.RetryAfter().Round(time.Second)/time.Second))))
				http.Error(w, "too many requests", http.StatusTooManyRequests)
				return
			}
			log.Debug("refused a caller", zap.String("path", r.URL.Path), zap.String("remote", r.RemoteAddr), zap.Error(err))
			w.Header().Set("WWW-Authenticate", `Bearer realm="nodewise-agent"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
