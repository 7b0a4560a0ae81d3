package agentpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// clockSkew backdates every certificate, so a peer whose clock runs behind
// still accepts it.
const clockSkew = 5 * time.Minute

// ca is the current signing CA and the bundle of CAs still trusted (the
// current one first, then earlier ones until they expire).
type ca struct {
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	bundle []*x509.Certificate
}

func newCA(now time.Time, life time.Duration) (*ca, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := randSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: fmt.Sprintf("nodewise-agent-ca@%d", now.Unix())},
		NotBefore: now.Add(-clockSkew), NotAfter: now.Add(life),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("creating the agents' CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &ca{cert: cert, key: key, bundle: []*x509.Certificate{cert}}, nil
}

func randSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// dueForRotation: a CA is replaced once less than a third of its life is
// left, long before any certificate it signed (capped at its NotAfter) runs
// out, so agents renew onto the new CA while the old one is still trusted.
func (c *ca) dueForRotation(now time.Time) bool {
	life := c.cert.NotAfter.Sub(c.cert.NotBefore)
	return c.cert.NotAfter.Sub(now) < life/3
}

// rotated is a new CA that trusts the old bundle's unexpired CAs too.
func (c *ca) rotated(now time.Time, life time.Duration) (*ca, error) {
	next, err := newCA(now, life)
	if err != nil {
		return nil, err
	}
	for _, old := range c.bundle {
		if old.NotAfter.After(now) {
			next.bundle = append(next.bundle, old)
		}
	}
	return next, nil
}

// Secret data keys.
const (
	keyCert   = "tls.crt"
	keyKey    = "tls.key"
	keyBundle = "ca.crt"
)

func (c *ca) secretData() (map[string][]byte, error) {
	der, err := x509.MarshalECPrivateKey(c.key)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		keyCert:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.cert.Raw}),
		keyKey:    pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}),
		keyBundle: c.bundlePEM(),
	}, nil
}

func (c *ca) bundlePEM() []byte {
	var out []byte
	for _, b := range c.bundle {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: b.Raw})...)
	}
	return out
}

func caFromSecret(data map[string][]byte) (*ca, error) {
	certs, err := parseCerts(data[keyCert])
	if err != nil || len(certs) != 1 {
		return nil, fmt.Errorf("secret key %s: want one CA certificate (%v)", keyCert, err)
	}
	blk, _ := pem.Decode(data[keyKey])
	if blk == nil {
		return nil, fmt.Errorf("secret key %s: no PEM block", keyKey)
	}
	key, err := x509.ParseECPrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("secret key %s: %w", keyKey, err)
	}
	if !key.PublicKey.Equal(certs[0].PublicKey) {
		return nil, errors.New("the CA key does not match the CA certificate")
	}
	bundle, err := parseCerts(data[keyBundle])
	if err != nil {
		return nil, fmt.Errorf("secret key %s: %w", keyBundle, err)
	}
	c := &ca{cert: certs[0], key: key, bundle: []*x509.Certificate{certs[0]}}
	for _, b := range bundle {
		if !b.Equal(certs[0]) {
			c.bundle = append(c.bundle, b)
		}
	}
	return c, nil
}

func parseCerts(p []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, p = pem.Decode(p)
		if blk == nil {
			return out, nil
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
}

// pool is the bundle as a CertPool.
func (c *ca) pool() *x509.CertPool {
	p := x509.NewCertPool()
	for _, b := range c.bundle {
		p.AddCert(b)
	}
	return p
}

// sign issues a serving certificate for the request's names and key, valid
// for life but never past the CA's own NotAfter.
func (c *ca) sign(req *x509.CertificateRequest, now time.Time, life time.Duration) ([]byte, error) {
	serial, err := randSerial()
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(life)
	if notAfter.After(c.cert.NotAfter) {
		notAfter = c.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: req.Subject,
		NotBefore: now.Add(-clockSkew), NotAfter: notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    req.DNSNames, IPAddresses: req.IPAddresses,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, req.PublicKey, c.key)
	if err != nil {
		return nil, fmt.Errorf("signing: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}
