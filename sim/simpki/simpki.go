// Package simpki makes the throwaway certificate authorities, serving
// certificates and bearer tokens the simulated cluster and the live data
// plane's node agents use. Nothing here is for production keys.
package simpki

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
	"time"
)

// CA is a self-signed P-256 certificate authority.
type CA struct {
	Key  *ecdsa.PrivateKey
	Cert *x509.Certificate
}

// NewCA makes a CA named cn, valid from an hour ago for life.
func NewCA(cn string, life time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl, err := template(cn, life)
	if err != nil {
		return nil, err
	}
	tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("creating CA %s: %w", cn, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Key: key, Cert: cert}, nil
}

// CertPEM is the CA certificate, PEM-encoded.
func (ca *CA) CertPEM() []byte { return PEM("CERTIFICATE", ca.Cert.Raw) }

// IssueServing signs a serving certificate for the given IPs and DNS names
// and returns it and its new key, PEM-encoded.
func (ca *CA) IssueServing(cn string, ips []net.IP, dns []string, life time.Duration) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl, err := template(cn, life)
	if err != nil {
		return nil, nil, err
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	tmpl.IPAddresses, tmpl.DNSNames = ips, dns
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, nil, fmt.Errorf("signing the certificate of %s: %w", cn, err)
	}
	keyPEM, err = KeyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return PEM("CERTIFICATE", der), keyPEM, nil
}

// template is a certificate valid from an hour ago (clock skew between the
// processes that check it) for life, with a random serial.
func template(cn string, life time.Duration) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	return &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(life)}, nil
}

// KeyPEM is an EC private key, PEM-encoded.
func KeyPEM(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, err
	}
	return PEM("EC PRIVATE KEY", der), nil
}

// PEM encodes one block.
func PEM(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}

// Token is a random bearer token (48 hex digits).
func Token() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
