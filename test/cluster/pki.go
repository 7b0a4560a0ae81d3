package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Identities the cluster's token file knows. Each component authenticates as
// the user a real cluster gives it, so the bootstrap RBAC roles apply.
const (
	userAdmin      = "nodewise-admin"
	userController = "system:kube-controller-manager"
	userScheduler  = "system:kube-scheduler"
	userKubelet    = "nodewise:sim-kubelet"
)

// pki is the cluster's certificate authority, serving certificate,
// service-account signing key and bearer tokens, all under dir.
type pki struct {
	dir    string
	tokens map[string]string // user -> token
}

func (p pki) path(name string) string { return filepath.Join(p.dir, name) }

// newPKI writes a fresh CA, an API-server serving certificate for loopback,
// a service-account key pair and a token file into dir.
func newPKI(dir string) (pki, error) {
	p := pki{dir: dir, tokens: map[string]string{}}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return p, err
	}
	caKey, caCert, err := selfSignedCA()
	if err != nil {
		return p, fmt.Errorf("creating CA: %w", err)
	}
	servingKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, err
	}
	serving := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(serviceIP)},
	}
	servingDER, err := x509.CreateCertificate(rand.Reader, serving, caCert, &servingKey.PublicKey, caKey)
	if err != nil {
		return p, fmt.Errorf("signing serving certificate: %w", err)
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, err
	}
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return p, err
	}
	files := map[string][]byte{
		"ca.crt":      pemBlock("CERTIFICATE", caCert.Raw),
		"serving.crt": pemBlock("CERTIFICATE", servingDER),
		"serving.key": mustECKey(servingKey),
		"sa.key":      mustECKey(saKey),
		"sa.pub":      pemBlock("PUBLIC KEY", saPub),
	}
	var csv strings.Builder
	for i, u := range []struct{ user, groups string }{
		{userAdmin, "system:masters"},
		{userController, ""},
		{userScheduler, ""},
		{userKubelet, "nodewise:sim"},
	} {
		tok, err := randomToken()
		if err != nil {
			return p, err
		}
		p.tokens[u.user] = tok
		fmt.Fprintf(&csv, "%s,%s,uid-%d,%q\n", tok, u.user, i, u.groups)
	}
	files["tokens.csv"] = []byte(csv.String())
	for name, data := range files {
		if err := os.WriteFile(p.path(name), data, 0o600); err != nil {
			return p, err
		}
	}
	return p, nil
}

// loadPKI reads the tokens of a PKI that newPKI wrote earlier.
func loadPKI(dir string) (pki, error) {
	p := pki{dir: dir, tokens: map[string]string{}}
	data, err := os.ReadFile(p.path("tokens.csv"))
	if err != nil {
		return p, err
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.SplitN(line, ",", 3)
		if len(f) < 3 {
			return p, fmt.Errorf("malformed token file %s", p.path("tokens.csv"))
		}
		p.tokens[f[1]] = f[0]
	}
	return p, nil
}

func selfSignedCA() (*ecdsa.PrivateKey, *x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "nodewise-sim-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return key, cert, err
}

func pemBlock(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}

func mustECKey(k *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		panic(err) // only fails for keys on unsupported curves; P-256 is supported
	}
	return pemBlock("EC PRIVATE KEY", der)
}

func randomToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
