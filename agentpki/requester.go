package agentpki

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	certv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// RequesterConfig configures the agent's side: its serving certificate from
// a CertificateSigningRequest.
type RequesterConfig struct {
	Kube kubernetes.Interface // as the agent's own ServiceAccount (required)
	Node string               // the node's name (required)
	IPs  []net.IP             // the node's addresses the orchestrator dials (required)
	// Poll is how often a pending request is checked (default 1s), Timeout
	// how long one request may stay unsigned before a new one (default 5m).
	Poll, Timeout time.Duration
	Logger        *zap.Logger
	Now           func() time.Time
}

// Requester holds the agent's current certificate and renews it. Its
// GetCertificate is the TLS server's.
type Requester struct {
	cfg  RequesterConfig
	cert atomic.Pointer[tls.Certificate]
}

// NewRequester validates cfg and fills its defaults.
func NewRequester(cfg RequesterConfig) (*Requester, error) {
	if cfg.Kube == nil || cfg.Node == "" {
		return nil, errors.New("agentpki.RequesterConfig: Kube and Node are required")
	}
	if len(cfg.IPs) == 0 {
		return nil, fmt.Errorf("agentpki.RequesterConfig: node %s: at least one IP is required (the orchestrator verifies the address it dials)", cfg.Node)
	}
	if cfg.Poll == 0 {
		cfg.Poll = time.Second
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Requester{cfg: cfg}, nil
}

// ParseIPs reads a comma-separated list of IPs (the downward API's status.hostIPs).
func ParseIPs(s string) ([]net.IP, error) {
	var out []net.IP
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		ip := net.ParseIP(f)
		if ip == nil {
			return nil, fmt.Errorf("%q is not an IP address", f)
		}
		out = append(out, ip)
	}
	return out, nil
}

// GetCertificate serves the current certificate (tls.Config.GetCertificate).
func (r *Requester) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c := r.cert.Load()
	if c == nil {
		return nil, errors.New("no serving certificate yet: the certificate request is not signed")
	}
	return c, nil
}

// Obtain requests a certificate and waits until it is signed, denied, or ctx ends.
func (r *Requester) Obtain(ctx context.Context) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject: pkix.Name{CommonName: "nodewise-agent:" + r.cfg.Node}, DNSNames: []string{r.cfg.Node}, IPAddresses: r.cfg.IPs,
	}, key)
	if err != nil {
		return fmt.Errorf("building the certificate request: %w", err)
	}
	csrs := r.cfg.Kube.CertificatesV1().CertificateSigningRequests()
	csr, err := csrs.Create(ctx, &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "nodewise-agent-" + r.cfg.Node + "-", Labels: map[string]string{"app.kubernetes.io/part-of": "nodewise"}},
		Spec: certv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: SignerName,
			Usages:     []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating the certificate request (signer %s): %w", SignerName, err)
	}
	r.cfg.Logger.Info("requested a serving certificate", zap.String("csr", csr.Name), zap.String("signer", SignerName))
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	t := time.NewTicker(r.cfg.Poll)
	defer t.Stop()
	for {
		got, err := csrs.Get(ctx, csr.Name, metav1.GetOptions{})
		if err == nil {
			for _, c := range got.Status.Conditions {
				if c.Type == certv1.CertificateDenied || c.Type == certv1.CertificateFailed {
					return fmt.Errorf("certificate request %s %s: %s: %s", csr.Name, strings.ToLower(string(c.Type)), c.Reason, c.Message)
				}
			}
			if len(got.Status.Certificate) > 0 {
				return r.install(got.Status.Certificate, key)
			}
		} else {
			r.cfg.Logger.Debug("reading the certificate request", zap.String("csr", csr.Name), zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("certificate request %s not signed: %w (is the orchestrator running with --agent-issuer?)", csr.Name, ctx.Err())
		case <-t.C:
		}
	}
}

func (r *Requester) install(certPEM []byte, key *ecdsa.PrivateKey) error {
	certs, err := parseCerts(certPEM)
	if err != nil || len(certs) == 0 {
		return fmt.Errorf("the signed certificate does not parse: %v", err)
	}
	if !key.PublicKey.Equal(certs[0].PublicKey) {
		return errors.New("the signed certificate is not for our key")
	}
	c := &tls.Certificate{PrivateKey: key, Leaf: certs[0]}
	for _, x := range certs {
		c.Certificate = append(c.Certificate, x.Raw)
	}
	r.cert.Store(c)
	r.cfg.Logger.Info("serving certificate installed", zap.Time("notAfter", certs[0].NotAfter))
	return nil
}

// renewAt is two thirds into the current certificate's life.
func (r *Requester) renewAt() time.Time {
	c := r.cert.Load()
	if c == nil {
		return r.cfg.Now()
	}
	nb, na := c.Leaf.NotBefore, c.Leaf.NotAfter
	return nb.Add(na.Sub(nb) * 2 / 3)
}

// Run renews the certificate two thirds into its life until ctx ends
// (Obtain the first one before serving). A failed renewal is retried after
// a minute; the current certificate keeps serving meanwhile.
func (r *Requester) Run(ctx context.Context) error {
	for {
		wait := r.renewAt().Sub(r.cfg.Now())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(max(wait, 0)):
		}
		if err := r.Obtain(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Warn("renewing the serving certificate failed; retrying in a minute", zap.Error(err))
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(time.Minute):
			}
		}
	}
}
