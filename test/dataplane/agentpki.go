package dataplane

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
	"time"
)

// agentPKI is what the node agents and the orchestrator share, as the
// agent DaemonSet's Secret would hold it: a CA, one serving certificate per
// node (its InternalIP as SAN, so the orchestrator verifies the IP it dialled)
// and the bearer token.
type agentPKI struct {
	caFile, tokenFile string
	certs             map[string][2]string // node → cert file, key file
}

// writeAgentPKI writes a fresh test CA, a certificate per node and a random
// token into dir.
func writeAgentPKI(dir string, nodes []AgentNode) (*agentPKI, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "nodewise-test-agent-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("creating the agent CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	p := &agentPKI{caFile: filepath.Join(dir, "agent-ca.pem"), tokenFile: filepath.Join(dir, "agent-token"), certs: map[string][2]string{}}
	if err := writePEM(p.caFile, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.tokenFile, []byte(hex.EncodeToString(tok)+"\n"), 0o600); err != nil {
		return nil, err
	}
	for i, n := range nodes {
		ip := net.ParseIP(n.IP)
		if ip == nil {
			return nil, fmt.Errorf("node %s: InternalIP %q is not an IP", n.Name, n.IP)
		}
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(int64(i + 2)), Subject: pkix.Name{CommonName: "nodewise-agent " + n.Name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			IPAddresses: []net.IP{ip}, DNSNames: []string{n.Name},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, fmt.Errorf("certificate of the agent on %s: %w", n.Name, err)
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return nil, err
		}
		cert, keyFile := filepath.Join(dir, "agent-"+n.Name+".pem"), filepath.Join(dir, "agent-"+n.Name+"-key.pem")
		if err := writePEM(cert, "CERTIFICATE", der); err != nil {
			return nil, err
		}
		if err := writePEM(keyFile, "EC PRIVATE KEY", keyDER); err != nil {
			return nil, err
		}
		p.certs[n.Name] = [2]string{cert, keyFile}
	}
	return p, nil
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
