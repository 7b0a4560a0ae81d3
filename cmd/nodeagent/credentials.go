package main

import (
	"context"
	"flag"
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodewise/nodewise/agentpki"
	"github.com/nodewise/nodewise/nodeagent"
)

// credFlags choose the agent's credentials from the cluster (package
// agentpki) instead of files: a serving certificate from a
// CertificateSigningRequest, and callers checked by TokenReview.
type credFlags struct {
	csr            bool
	nodeIPs        string
	review         bool
	audience       string
	allowed        []string
	metricsCallers []string
}

func (c *credFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&c.csr, "tls-csr", false, "get the serving certificate from a CertificateSigningRequest (signer "+agentpki.SignerName+") instead of --tls-cert/--tls-key; the key stays in memory")
	fs.StringVar(&c.nodeIPs, "node-ips", "", "comma-separated IPs of this node to name in the certificate (the downward API's status.hostIPs)")
	fs.BoolVar(&c.review, "token-review", false, "check callers' ServiceAccount tokens with a TokenReview instead of --token-file")
	fs.StringVar(&c.audience, "token-audience", agentpki.DefaultAudience, "audience the callers' tokens must carry (with --token-review)")
	fs.Func("allowed-caller", "ServiceAccount username admitted to every endpoint (with --token-review; repeatable)", func(v string) error {
		c.allowed = append(c.allowed, v)
		return nil
	})
	fs.Func("metrics-caller", "ServiceAccount username admitted to /metrics only, with any token of its own (repeatable)", func(v string) error {
		c.metricsCallers = append(c.metricsCallers, v)
		return nil
	})
}

// apply fills cfg's certificate and authenticator, and returns the renewal
// loop to run beside the agent (nil without --tls-csr). The first
// certificate is obtained here, before the agent listens.
func (c *credFlags) apply(ctx context.Context, cfg *nodeagent.Config, rc *rest.Config, client kubernetes.Interface) (func(context.Context) error, error) {
	if !c.csr && !c.review {
		return nil, nil
	}
	if client == nil {
		return nil, fmt.Errorf("--tls-csr and --token-review need the Kubernetes API (in-cluster, or --kubeconfig)")
	}
	if c.review {
		if cfg.TokenFile != "" {
			return nil, fmt.Errorf("--token-review and --token-file exclude each other")
		}
		reviews, err := agentpki.ReviewClient(rc) // its own limits: reviews never queue behind the pod lister
		if err != nil {
			return nil, err
		}
		r, err := agentpki.NewReviewer(agentpki.ReviewerConfig{Kube: reviews, Audience: c.audience, Allowed: c.allowed, MetricsCallers: c.metricsCallers, Logger: cfg.Logger.Named("tokenreview")})
		if err != nil {
			return nil, fmt.Errorf("--token-review: %w", err)
		}
		cfg.Authenticator = r
	}
	if !c.csr {
		return nil, nil
	}
	if cfg.CertFile != "" || cfg.KeyFile != "" {
		return nil, fmt.Errorf("--tls-csr and --tls-cert/--tls-key exclude each other")
	}
	ips, err := agentpki.ParseIPs(c.nodeIPs)
	if err != nil {
		return nil, fmt.Errorf("--node-ips: %w", err)
	}
	node := cfg.Node
	if node == "" {
		return nil, fmt.Errorf("--tls-csr needs the node name (--node or $NODE_NAME)")
	}
	req, err := agentpki.NewRequester(agentpki.RequesterConfig{Kube: client, Node: node, IPs: ips, Logger: cfg.Logger.Named("certificate")})
	if err != nil {
		return nil, fmt.Errorf("--tls-csr: %w", err)
	}
	if err := req.Obtain(ctx); err != nil {
		return nil, err
	}
	cfg.GetCertificate = req.GetCertificate
	return req.Run, nil
}
