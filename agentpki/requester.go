package agentpki

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	certv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/certificate"
	"k8s.io/client-go/util/certificate/csr"
	"k8s.io/client-go/util/keyutil"
)

// RequesterConfig configures the agent's side: its serving certificate from
// a CertificateSigningRequest.
type RequesterConfig struct {
	Kube kubernetes.Interface // as the agent's own ServiceAccount (required)
	Node string               // the node's name (required)
	IPs  []net.IP             // the node's addresses the orchestrator dials (required)
	// Timeout is how long the first request may stay unsigned (default 5m).
	Timeout time.Duration
	Logger  *zap.Logger
}

// usages are the key usages the agent asks for and the Signer issues.
var usages = []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth}

// Requester holds the agent's current certificate and renews it with
// client-go's certificate manager (the kubelet's serving-certificate
// rotation). Its GetCertificate is the TLS server's.
type Requester struct {
	cfg   RequesterConfig
	store memoryStore
}

// NewRequester validates cfg and fills its defaults.
func NewRequester(cfg RequesterConfig) (*Requester, error) {
	if cfg.Kube == nil || cfg.Node == "" {
		return nil, errors.New("agentpki.RequesterConfig: Kube and Node are required")
	}
	if len(cfg.IPs) == 0 {
		return nil, fmt.Errorf("agentpki.RequesterConfig: node %s: at least one IP is required (the orchestrator verifies the address it dials)", cfg.Node)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	r := &Requester{cfg: cfg}
	r.store.log = cfg.Logger
	return r, nil
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

// template is what every request asks for: the node's name (the identity
// the orchestrator verifies) and its addresses (where it dials).
func (r *Requester) template() *x509.CertificateRequest {
	return &x509.CertificateRequest{Subject: pkix.Name{CommonName: "nodewise-agent:" + r.cfg.Node}, DNSNames: []string{r.cfg.Node}, IPAddresses: r.cfg.IPs}
}

// GetCertificate serves the current certificate (tls.Config.GetCertificate).
func (r *Requester) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c := r.store.cert.Load()
	if c == nil {
		return nil, errors.New("no serving certificate yet: the certificate request is not signed")
	}
	if time.Now().After(c.Leaf.NotAfter) {
		return nil, fmt.Errorf("the serving certificate expired at %s and no renewal was signed (is the orchestrator running with --agent-issuer?)", c.Leaf.NotAfter.Format(time.RFC3339))
	}
	return c, nil
}

// Obtain requests the first certificate and waits (watching the request)
// until it is signed, denied, or the Timeout or ctx ends. Serve only after
// it succeeds; a denial is an error naming the Signer's reason.
func (r *Requester) Obtain(ctx context.Context) error {
	key, err := keyutil.MakeEllipticPrivateKeyPEM()
	if err != nil {
		return err
	}
	signer, err := keyutil.ParsePrivateKeyPEM(key)
	if err != nil {
		return err
	}
	csrPEM, err := cert.MakeCSRFromTemplate(signer, r.template())
	if err != nil {
		return err
	}
	name, uid, err := csr.RequestCertificateWithContext(ctx, r.cfg.Kube, csrPEM, "", SignerName, nil, usages, signer)
	if err != nil {
		return fmt.Errorf("creating the certificate request (signer %s): %w", SignerName, err)
	}
	r.cfg.Logger.Info("requested a serving certificate", zap.String("csr", name), zap.String("signer", SignerName))
	wctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	certPEM, err := csr.WaitForCertificate(wctx, r.cfg.Kube, name, uid)
	if err != nil {
		if wctx.Err() != nil {
			return fmt.Errorf("certificate request %s not signed within %s (is the orchestrator running with --agent-issuer?)", name, r.cfg.Timeout)
		}
		return fmt.Errorf("certificate request %s: %w", name, err)
	}
	c, err := r.store.Update(certPEM, key)
	if err != nil {
		return err
	}
	r.cfg.Logger.Info("serving certificate installed", zap.String("csr", name), zap.Time("notAfter", c.Leaf.NotAfter))
	return nil
}

// Run renews the certificate until ctx ends (Obtain the first one before):
// client-go's certificate manager requests a new key's certificate at 70 to
// 90% of the current one's life, retrying with backoff, and the current
// certificate keeps serving meanwhile.
func (r *Requester) Run(ctx context.Context) error {
	if r.store.cert.Load() == nil {
		return errors.New("agentpki.Requester.Run: no certificate yet (call Obtain first)")
	}
	m, err := certificate.NewManager(&certificate.Config{
		ClientsetFn:      func(*tls.Certificate) (kubernetes.Interface, error) { return r.cfg.Kube, nil },
		Template:         r.template(),
		SignerName:       SignerName,
		Usages:           usages,
		CertificateStore: &r.store,
		Name:             "nodewise-agent serving certificate",
	})
	if err != nil {
		return fmt.Errorf("the certificate manager: %w", err)
	}
	m.Start()
	<-ctx.Done()
	m.Stop()
	return nil
}

// memoryStore is the manager's certificate store: the key never leaves
// memory, so a restarted agent asks again.
type memoryStore struct {
	cert atomic.Pointer[tls.Certificate]
	log  *zap.Logger
}

func (s *memoryStore) Current() (*tls.Certificate, error) {
	if c := s.cert.Load(); c != nil {
		return c, nil
	}
	e := certificate.NoCertKeyError("no serving certificate yet")
	return nil, &e
}

func (s *memoryStore) Update(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("the signed certificate does not match our key: %w", err)
	}
	if c.Leaf == nil {
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return nil, err
		}
	}
	old := s.cert.Swap(&c)
	if old != nil {
		s.log.Info("serving certificate renewed", zap.Time("oldNotAfter", old.Leaf.NotAfter), zap.Time("notAfter", c.Leaf.NotAfter))
	}
	return &c, nil
}
