package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nodewise/nodewise/sim/simpki"
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
	const year = 365 * 24 * time.Hour
	ca, err := simpki.NewCA("nodewise-sim-ca", 10*year)
	if err != nil {
		return p, err
	}
	servingCert, servingKey, err := ca.IssueServing("kube-apiserver",
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP(serviceIP)},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}, year)
	if err != nil {
		return p, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, err
	}
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return p, err
	}
	saKeyPEM, err := simpki.KeyPEM(saKey)
	if err != nil {
		return p, err
	}
	files := map[string][]byte{
		"ca.crt":      ca.CertPEM(),
		"serving.crt": servingCert,
		"serving.key": servingKey,
		"sa.key":      saKeyPEM,
		"sa.pub":      simpki.PEM("PUBLIC KEY", saPub),
	}
	var csv strings.Builder
	for i, u := range []struct{ user, groups string }{
		{userAdmin, "system:masters"},
		{userController, ""},
		{userScheduler, ""},
		{userKubelet, "nodewise:sim"},
	} {
		tok, err := simpki.Token()
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
