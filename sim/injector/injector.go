// Package injector is a stand-in for istiod's sidecar injector, one per
// revision, for tests against the real API server. It serves HTTPS on
// loopback at /inject/rev/<rev> and, at pod admission, adds an istio-proxy
// container whose image tag is that revision's version plus the
// sidecar.istio.io/status annotation naming the revision, as istiod does.
// Register it with cluster.IstioOptions{InjectorURL: s.URL, CABundle: s.CABundle}.
package injector

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/sim/simpki"
)

// Server is a running injector for any number of revisions.
type Server struct {
	// CABundle is the PEM CA that signed the serving certificate.
	CABundle []byte

	cfg      Config
	addr     string
	srv      *http.Server
	mu       sync.Mutex
	versions map[string]string
	injected map[string]int
}

// Config says where an injector listens and what it answers.
type Config struct {
	// Addr is the loopback address to listen on (default 127.0.0.1:0).
	Addr string
	// CertDir, when set, holds the CA and serving certificate (ca.crt,
	// tls.crt, tls.key): loaded when present, else made and written there
	// first, so a restarted injector keeps the CA its webhooks trust.
	// Empty: a fresh CA in memory.
	CertDir string
	// VersionOf, when set, gives the proxy version of a revision that
	// SetRevision never named, as each revision's istiod knows its own.
	VersionOf func(ctx context.Context, rev string) (string, error)
}

// Start serves on 127.0.0.1 with a fresh CA. Close it when done.
func Start() (*Server, error) { return StartWith(Config{}) }

// StartWith serves as cfg says. Close it when done.
func StartWith(cfg Config) (*Server, error) {
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	caPEM, cert, err := certificates(cfg.CertDir)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("injector: listening on %s: %w", cfg.Addr, err)
	}
	s := &Server{
		CABundle: caPEM,
		cfg:      cfg,
		addr:     ln.Addr().String(),
		versions: map[string]string{},
		injected: map[string]int{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/inject/rev/", s.inject)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		_ = s.srv.Serve(tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}))
	}()
	return s, nil
}

// WriteCertificates makes the CA and serving certificate in dir unless they
// are there already, and returns the CA bundle, for a cluster that registers
// the webhooks before its injector process has started.
func WriteCertificates(dir string) ([]byte, error) {
	ca, _, err := certificates(dir)
	return ca, err
}

// certificates loads dir's CA and serving pair, or makes them (and writes
// them to dir when it is not empty). The serving certificate is for
// 127.0.0.1 and localhost.
func certificates(dir string) (caPEM []byte, cert tls.Certificate, err error) {
	files := [3]string{filepath.Join(dir, "ca.crt"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")}
	if dir != "" {
		if caPEM, err = os.ReadFile(files[0]); err == nil {
			cert, err = tls.LoadX509KeyPair(files[1], files[2])
			if err != nil {
				return nil, tls.Certificate{}, fmt.Errorf("injector: loading its certificate from %s: %w", dir, err)
			}
			return caPEM, cert, nil
		}
	}
	ca, err := simpki.NewCA("test-injector-ca", 365*24*time.Hour)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	certPEM, keyPEM, err := ca.IssueServing("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, []string{"localhost"}, 365*24*time.Hour)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	if cert, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return nil, tls.Certificate{}, err
	}
	caPEM = ca.CertPEM()
	if dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, tls.Certificate{}, err
		}
		// The CA last: its presence says the pair is complete.
		for i, data := range [][]byte{keyPEM, certPEM, caPEM} {
			if err := os.WriteFile(files[2-i], data, 0o600); err != nil {
				return nil, tls.Certificate{}, fmt.Errorf("injector: writing its certificate to %s: %w", dir, err)
			}
		}
	}
	return caPEM, cert, nil
}

// Close stops serving.
func (s *Server) Close() { _ = s.srv.Close() }

// SetRevision makes the injector answer for rev with proxies of version.
func (s *Server) SetRevision(rev, version string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.versions[rev] = version
}

// URL is the injection URL of a revision (cluster.IstioOptions.InjectorURL).
func (s *Server) URL(rev string) string { return "https://" + s.addr + "/inject/rev/" + rev }

// Injected is how many pods a revision has injected.
func (s *Server) Injected(rev string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.injected[rev]
}

// ProxyImage is the sidecar image a version injects.
func ProxyImage(version string) string { return "docker.io/istio/proxyv2:" + version }

func (s *Server) inject(w http.ResponseWriter, r *http.Request) {
	rev := strings.TrimPrefix(r.URL.Path, "/inject/rev/")
	body, err := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil || review.Request == nil {
		http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	s.mu.Lock()
	version, known := s.versions[rev]
	s.mu.Unlock()
	why := ""
	if !known && s.cfg.VersionOf != nil {
		v, err := s.cfg.VersionOf(r.Context(), rev)
		if err != nil {
			why = ": " + err.Error()
		}
		version, known = v, err == nil
	}
	var pod corev1.Pod
	if err := json.Unmarshal(review.Request.Object.Raw, &pod); err != nil {
		resp.Allowed = false
		resp.Result = statusErr("decoding pod: " + err.Error())
	} else if !known {
		resp.Allowed = false
		resp.Result = statusErr("injector has no revision " + rev + why)
	} else if patch, err := Patch(&pod, rev, version); err != nil {
		resp.Allowed = false
		resp.Result = statusErr(err.Error())
	} else if patch != nil {
		pt := admissionv1.PatchTypeJSONPatch
		resp.Patch, resp.PatchType = patch, &pt
		s.mu.Lock()
		s.injected[rev]++
		s.mu.Unlock()
	}
	review.Response = resp
	review.Request = nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(review)
}

// Patch is the JSON patch that injects rev's proxy into pod (nil when the
// pod already has one).
func Patch(pod *corev1.Pod, rev, version string) ([]byte, error) {
	for _, c := range pod.Spec.Containers {
		if c.Name == "istio-proxy" {
			return nil, nil
		}
	}
	status, err := json.Marshal(map[string]any{
		"initContainers": []string{}, "containers": []string{"istio-proxy"},
		"volumes": []string{}, "imagePullSecrets": nil, "revision": rev,
	})
	if err != nil {
		return nil, err
	}
	type op struct {
		Op    string `json:"op"`
		Path  string `json:"path"`
		Value any    `json:"value"`
	}
	proxy := corev1.Container{
		Name: "istio-proxy", Image: ProxyImage(version),
		Args:  []string{"proxy", "sidecar"},
		Ports: []corev1.ContainerPort{{Name: "http-envoy-prom", ContainerPort: 15090}},
	}
	ops := []op{{Op: "add", Path: "/spec/containers/-", Value: proxy}}
	if pod.Annotations == nil {
		ops = append(ops, op{Op: "add", Path: "/metadata/annotations", Value: map[string]string{"sidecar.istio.io/status": string(status)}})
	} else {
		ops = append(ops, op{Op: "add", Path: "/metadata/annotations/sidecar.istio.io~1status", Value: string(status)})
	}
	if pod.Labels == nil {
		ops = append(ops, op{Op: "add", Path: "/metadata/labels", Value: map[string]string{"service.istio.io/canonical-revision": rev}})
	} else {
		ops = append(ops, op{Op: "add", Path: "/metadata/labels/service.istio.io~1canonical-revision", Value: rev})
	}
	return json.Marshal(ops)
}

func statusErr(msg string) *metav1.Status {
	return &metav1.Status{Message: msg, Code: http.StatusForbidden}
}
