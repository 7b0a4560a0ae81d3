package simpki

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"testing"
	"time"
)

func TestIssuedCertificateVerifiesForItsIPAndNameOnly(t *testing.T) {
	ca, err := NewCA("test-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := ca.IssueServing("agent", []net.IP{net.ParseIP("127.1.0.3")}, []string{"node-003"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatalf("certificate and key do not pair: %v", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca.CertPEM()) {
		t.Fatal("CA PEM not accepted")
	}
	for _, name := range []string{"127.1.0.3", "node-003"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: name}); err != nil {
			t.Errorf("verifying for %s: %v", name, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.1.0.4"}); err == nil {
		t.Error("verified for an IP it was not issued for")
	}
	other, err := NewCA("other", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	others := x509.NewCertPool()
	others.AddCert(other.Cert)
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: others, DNSName: "node-003"}); err == nil {
		t.Error("verified against a CA that did not sign it")
	}
	if a, b := mustToken(t), mustToken(t); a == b || len(a) != 48 {
		t.Errorf("tokens %q %q: want two different 48-digit tokens", a, b)
	}
}

func mustToken(t *testing.T) string {
	tok, err := Token()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
