package dashboard

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Who may use a dashboard. Two checks run on every request, before any
// handler:
//
//   - Host: the name the browser used must be this dashboard's (a loopback
//     name, the listen address, or one of Config.AllowedHosts). A page of
//     evil.example whose DNS is rebound to 127.0.0.1 reaches the port with
//     Host evil.example and is refused: 421.
//   - Session: with Config.Token set (`nodewise dashboard` always sets it),
//     every request but the static files carries the token: the cookie the
//     printed URL set, or Authorization: Bearer. Another local user of the
//     host, or a page that only knows the port, gets 401.
//
// Actions additionally need header X-Nodewise-Action and, when the browser
// names one, the dashboard's own Origin (Server.action).

// TokenParam is the query parameter of the URL a dashboard prints.
const TokenParam = "token"

// NewToken is a fresh session secret: 24 random bytes, in hex.
func NewToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("dashboard: making the session token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// URL is the address a person opens: http://addr/, with the session's
// ?token= when the dashboard has one. An address on every interface is
// opened at loopback.
func (s *Server) URL(addr string) string {
	if h, p, err := net.SplitHostPort(addr); err == nil {
		if ip := net.ParseIP(h); ip != nil && ip.IsUnspecified() {
			loop := "127.0.0.1"
			if ip.To4() == nil {
				loop = "::1"
			}
			addr = net.JoinHostPort(loop, p)
		}
	}
	u := "http://" + addr + "/"
	if s.cfg.Token != "" {
		u += "?" + TokenParam + "=" + url.QueryEscape(s.cfg.Token)
	}
	return u
}

// hostRule is one accepted Host: a name at any port, or a name and port.
type hostRule struct{ host, port string }

func parseHostRule(v string) (hostRule, error) {
	v = strings.ToLower(strings.TrimSpace(v))
	if v == "" || strings.ContainsAny(v, "/@?# ") {
		return hostRule{}, fmt.Errorf("%q is not a host name or host:port", v)
	}
	if h, p, err := net.SplitHostPort(v); err == nil {
		if h == "" || p == "" {
			return hostRule{}, fmt.Errorf("%q is not a host name or host:port", v)
		}
		return hostRule{h, p}, nil
	}
	return hostRule{strings.TrimSuffix(strings.TrimPrefix(v, "["), "]"), ""}, nil
}

// splitHost is a Host header's name (lower case, without brackets) and port.
func splitHost(hostport string) (string, string) {
	hostport = strings.ToLower(hostport)
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		return h, p
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]"), ""
}

// loopbackName is a name that cannot be rebound: localhost and the loopback
// addresses. Any port is accepted, as kubectl port-forward or ssh -L pick
// the local one.
func loopbackName(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// hostAllowed says whether the request's Host is one of this dashboard's
// names: a loopback name, the listen address (listen, when serving on a
// listener), or one of Config.AllowedHosts.
func (s *Server) hostAllowed(host string, listen hostRule) bool {
	h, p := splitHost(host)
	if loopbackName(h) || (listen.host != "" && h == listen.host && p == listen.port) {
		return true
	}
	for _, r := range s.allowed {
		if h == r.host && (r.port == "" || p == r.port) {
			return true
		}
	}
	return false
}

// listenRule is the Host a browser sends for the listen address; none for an
// unspecified address (0.0.0.0, ::), which is no name a browser uses.
func listenRule(a net.Addr) hostRule {
	tcp, ok := a.(*net.TCPAddr)
	if !ok || tcp.IP == nil || tcp.IP.IsUnspecified() {
		return hostRule{}
	}
	h, p := splitHost(tcp.String())
	return hostRule{h, p}
}

// guard wraps next in the Host and session checks.
func (s *Server) guard(next http.Handler, listen hostRule) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hostAllowed(r.Host, listen) {
			refuse(w, r, http.StatusMisdirectedRequest, fmt.Sprintf("refused: Host %q is not a name of this dashboard; open it at 127.0.0.1 or localhost, or start it with --allowed-host naming the host you reach it by", r.Host))
			return
		}
		if s.cfg.Token == "" || strings.HasPrefix(r.URL.Path, "/static/") {
			next.ServeHTTP(w, r)
			return
		}
		cookie := cookieName(r.Host)
		if q := r.URL.Query(); q.Has(TokenParam) && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			if !s.tokenIs(q.Get(TokenParam)) {
				refuse(w, r, http.StatusUnauthorized, "refused: the token in this address is not this dashboard session's; "+s.cfg.LoginHint)
				return
			}
			// The token leaves the address bar (and its history) for a cookie
			// only this origin's own pages send.
			http.SetCookie(w, &http.Cookie{Name: cookie, Value: s.cfg.Token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
			q.Del(TokenParam)
			to := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
			w.Header().Set("Cache-Control", "no-store")
			http.Redirect(w, r, to.String(), http.StatusSeeOther)
			return
		}
		if !s.tokenIs(sessionToken(r, cookie)) {
			refuse(w, r, http.StatusUnauthorized, "refused: this dashboard answers only its session; "+s.cfg.LoginHint)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// sessionToken is the token a request carries: Authorization: Bearer, else
// the session cookie.
func sessionToken(r *http.Request, cookie string) string {
	if t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return strings.TrimSpace(t)
	}
	if c, err := r.Cookie(cookie); err == nil {
		return c.Value
	}
	return ""
}

// tokenIs compares in constant time (of the digests: not even the length
// leaks).
func (s *Server) tokenIs(got string) bool {
	g := sha256.Sum256([]byte(got))
	return got != "" && subtle.ConstantTimeCompare(g[:], s.tokenSum[:]) == 1
}

// cookieName is per port: cookies are shared by every port of a host, and
// two dashboards on one machine keep their sessions apart.
func cookieName(host string) string {
	_, p := splitHost(host)
	if p == "" {
		p = "80"
	}
	return "nodewise-dashboard-" + p
}

// refuse answers a refused request in one line: JSON for an action (the
// page shows its message), text otherwise.
func refuse(w http.ResponseWriter, r *http.Request, code int, msg string) {
	w.Header().Set("Cache-Control", "no-store")
	if r.Method == http.MethodPost {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
		return
	}
	http.Error(w, msg, code)
}

// validateAccess checks and fills the access fields of cfg.
func (s *Server) validateAccess() error {
	cfg := &s.cfg
	if cfg.Token == "" && !cfg.ReadOnly {
		return errors.New("dashboard: Config.Token is required when actions are on (they run with the dashboard's credentials); NewToken makes one")
	}
	if cfg.LoginHint == "" {
		cfg.LoginHint = "open the URL with ?token= that `nodewise dashboard` printed when it started"
	}
	for _, v := range cfg.AllowedHosts {
		r, err := parseHostRule(v)
		if err != nil {
			return fmt.Errorf("dashboard: AllowedHosts (--allowed-host): %w", err)
		}
		s.allowed = append(s.allowed, r)
	}
	s.tokenSum = sha256.Sum256([]byte(cfg.Token))
	return nil
}
