package agentpki

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func request(t *testing.T, node string, ips ...string) *x509.CertificateRequest {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: "nodewise-agent:" + node}, DNSNames: []string{node}}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	req, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func verify(t *testing.T, c *ca, certPEM []byte, ip string, at time.Time) error {
	t.Helper()
	certs, err := parseCerts(certPEM)
	if err != nil || len(certs) != 1 {
		t.Fatalf("issued certificate: %v", err)
	}
	_, err = certs[0].Verify(x509.VerifyOptions{Roots: c.pool(), DNSName: ip, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err
}

// TestCARotation: a CA is replaced with a third of its life left; the new
// bundle still trusts what the old CA signed until it expires, then drops it;
// no certificate outlives the CA that signed it.
func TestCARotation(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	life := 300 * time.Hour
	old, err := newCA(t0, life)
	if err != nil {
		t.Fatal(err)
	}
	if old.dueForRotation(t0.Add(190 * time.Hour)) {
		t.Error("due for rotation with more than a third of its life left")
	}
	at := t0.Add(210 * time.Hour)
	if !old.dueForRotation(at) {
		t.Fatal("not due for rotation with less than a third of its life left")
	}
	// Signed by the old CA just before rotation, for longer than it lives.
	oldCert, err := old.sign(request(t, "n1", "127.0.0.7"), at.Add(-time.Hour), 200*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certs, _ := parseCerts(oldCert)
	if !certs[0].NotAfter.Equal(old.cert.NotAfter) {
		t.Errorf("certificate NotAfter %s, want capped at the CA's %s", certs[0].NotAfter, old.cert.NotAfter)
	}
	next, err := old.rotated(at, life)
	if err != nil {
		t.Fatal(err)
	}
	if len(next.bundle) != 2 || !next.bundle[0].Equal(next.cert) {
		t.Fatalf("rotated bundle has %d CAs, want the new one first, then the old", len(next.bundle))
	}
	if err := verify(t, next, oldCert, "127.0.0.7", at); err != nil {
		t.Errorf("the rotated bundle no longer trusts the old CA's certificate: %v", err)
	}
	newCert, err := next.sign(request(t, "n1", "127.0.0.7"), at, 100*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := verify(t, next, newCert, "127.0.0.7", at); err != nil {
		t.Errorf("the new CA's certificate: %v", err)
	}
	if err := verify(t, next, newCert, "127.0.0.8", at); err == nil {
		t.Error("verified for an IP it was not issued for")
	}
	// Round trip through the Secret, then a rotation after the old CA expired drops it.
	data, err := next.secretData()
	if err != nil {
		t.Fatal(err)
	}
	back, err := caFromSecret(data)
	if err != nil || len(back.bundle) != 2 {
		t.Fatalf("from the Secret: %v (bundle %d)", err, len(back.bundle))
	}
	later, err := back.rotated(t0.Add(life+time.Hour), life)
	if err != nil {
		t.Fatal(err)
	}
	if len(later.bundle) != 2 { // the new one and next; old has expired
		t.Errorf("bundle after the old CA expired holds %d CAs, want 2", len(later.bundle))
	}
	for _, b := range later.bundle {
		if b.Equal(old.cert) {
			t.Error("an expired CA is still trusted")
		}
	}
}

// TestSignerCreatesPublishesAndRotates drives the Secret and ConfigMap
// through creation, reuse and rotation (the fake clientset: no conflicts here;
// test/chart runs the signer against the real API server).
func TestSignerCreatesPublishesAndRotates(t *testing.T) {
	kube := fake.NewClientset()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s, err := NewSigner(SignerConfig{Kube: kube, Namespace: "ns", CAValidity: 30 * time.Hour, CertValidity: 10 * time.Hour, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if s.Pool() != nil {
		t.Error("a pool before the CA is loaded")
	}
	if err := s.Once(ctx); err != nil {
		t.Fatal(err)
	}
	first := s.ca.Load().cert
	if s.Pool() == nil {
		t.Fatal("no pool after the first round")
	}
	if err := s.Once(ctx); err != nil {
		t.Fatal(err)
	}
	if !s.ca.Load().cert.Equal(first) {
		t.Fatal("the CA changed without being due")
	}
	now = now.Add(21 * time.Hour)
	if err := s.Once(ctx); err != nil {
		t.Fatal(err)
	}
	c := s.ca.Load()
	if c.cert.Equal(first) || len(c.bundle) != 2 {
		t.Fatalf("not rotated (bundle %d)", len(c.bundle))
	}
	cm, err := kube.CoreV1().ConfigMaps("ns").Get(ctx, BundleConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(cm.Data["ca.crt"], "BEGIN CERTIFICATE"); got != 2 {
		t.Errorf("published bundle holds %d certificates, want 2", got)
	}
	if _, err := NewSigner(SignerConfig{Kube: kube, Namespace: "ns", CAValidity: 30 * time.Hour, CertValidity: 11 * time.Hour}); err == nil {
		t.Error("accepted a certificate life over a third of the CA's")
	}
}

// TestReviewerCachesVerdicts: one TokenReview per token and TTL, for good
// and bad tokens alike; metrics callers reach /metrics only.
func TestReviewerCachesVerdicts(t *testing.T) {
	kube := fake.NewClientset()
	reviews := 0
	kube.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		reviews++
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		st := authnv1.TokenReviewStatus{}
		switch {
		case tr.Spec.Token == "orch" && len(tr.Spec.Audiences) == 1 && tr.Spec.Audiences[0] == DefaultAudience:
			st = authnv1.TokenReviewStatus{Authenticated: true, Audiences: tr.Spec.Audiences, User: authnv1.UserInfo{Username: "system:serviceaccount:ns:orch"}}
		case tr.Spec.Token == "prom" && len(tr.Spec.Audiences) == 0:
			st = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "system:serviceaccount:mon:prom"}}
		}
		tr.Status = st
		return true, tr, nil
	})
	now := time.Unix(1000, 0)
	r, err := NewReviewer(ReviewerConfig{Kube: kube, Allowed: []string{"system:serviceaccount:ns:orch"}, MetricsCallers: []string{"system:serviceaccount:mon:prom"}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	call := func(path, tok string) error {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		return r.Authenticate(req)
	}
	for range 3 {
		if err := call("/v1/snapshot", "orch"); err != nil {
			t.Fatal(err)
		}
	}
	if reviews != 1 {
		t.Errorf("%d reviews for three calls with one token, want 1", reviews)
	}
	if err := call("/v1/snapshot", "prom"); err == nil {
		t.Error("a metrics caller read the snapshot")
	}
	if err := call("/metrics", "prom"); err != nil {
		t.Errorf("a metrics caller refused /metrics: %v", err)
	}
	if err := call("/metrics", "bad"); err == nil {
		t.Error("a bad token read /metrics")
	}
	before := reviews
	_ = call("/metrics", "bad")
	if reviews != before {
		t.Error("a refused token was reviewed again within the TTL")
	}
	now = now.Add(2 * time.Minute)
	if err := call("/v1/snapshot", "orch"); err != nil || reviews != before+1 {
		t.Errorf("after the TTL: %v, %d reviews (want one more)", err, reviews-before)
	}
	// A flood of unknown tokens from one source is rationed and leaves the
	// admitted verdict in place: no review for it, none beyond the burst.
	before = reviews
	limited := 0
	for i := range 2 * maxCached {
		var rl RateLimited
		if err := call("/v1/snapshot", fmt.Sprintf("random-%d", i)); errors.As(err, &rl) {
			limited++
		}
	}
	if err := call("/v1/snapshot", "orch"); err != nil {
		t.Errorf("the admitted token after a flood: %v", err)
	}
	if got := reviews - before; got != unknownPerSourceBurst || limited != 2*maxCached-unknownPerSourceBurst {
		t.Errorf("a flood of %d unknown tokens: %d reviews, %d refused as rate-limited; want %d reviews, the rest refused", 2*maxCached, got, limited, unknownPerSourceBurst)
	}
	if _, err := NewReviewer(ReviewerConfig{Kube: kube, Allowed: []string{"orch"}}); err == nil {
		t.Error("accepted a caller that is not a ServiceAccount username")
	}
}
