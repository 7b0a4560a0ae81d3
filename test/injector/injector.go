// Package injector is a stand-in for istiod's sidecar injector, one per
// revision, for tests against the real API server. It serves HTTPS on
// loopback at /inject/rev/<rev> and, at pod admission, adds an istio-proxy
// container whose image tag is that revision's version plus the
// sidecar.istio.io/status annotation naming the revision, as istiod does.
// Register it with cluster.IstioOptions{InjectorURL: s.URL, CABundle: s.CABundle}.
package injector

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Server is a running injector for any number of revisions.
type Server struct {
	// CABundle is the PEM CA that signed the serving certificate.
	CABundle []byte

	addr     string
	srv      *http.Server
	mu       sync.Mutex
	versions map[string]string
	injected map[string]int
}

// Start serves on 127.0.0.1 with a fresh CA. Close it when done.
func Start() (*Server, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-injector-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("signing CA: %w", err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating serving key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("signing serving cert: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening: %w", err)
	}
	s := &Server{
		CABundle: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		addr:     ln.Addr().String(),
		versions: map[string]string{},
		injected: map[string]int{},
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/inject/rev/", s.inject)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	go func() {
		_ = s.srv.Serve(tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}))
	}()
	return s, nil
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
	var pod corev1.Pod
	if err := json.Unmarshal(review.Request.Object.Raw, &pod); err != nil {
		resp.Allowed = false
		resp.Result = statusErr("decoding pod: " + err.Error())
	} else if !known {
		resp.Allowed = false
		resp.Result = statusErr("injector has no revision " + rev)
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
