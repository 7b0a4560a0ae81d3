package chart

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"go.uber.org/zap"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodewise/nodewise/agentpki"
	"github.com/nodewise/nodewise/nodeagent"
)

// Installed is the chart applied to a cluster (Config and Client are an
// administrator's), with what a test needs to act as the chart's pods do.
type Installed struct {
	Config *rest.Config
	Client kubernetes.Interface
}

// AllowedCallers are the callers the chart's agent DaemonSet admits to every
// endpoint (its --allowed-caller arguments), as applied to the cluster.
func (in Installed) AllowedCallers(ctx context.Context) ([]string, error) {
	ds, err := in.Client.AppsV1().DaemonSets(AgentNamespace).Get(ctx, "nodewise-agent", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading the chart's agent DaemonSet: %w", err)
	}
	var out []string
	for _, c := range ds.Spec.Template.Spec.Containers {
		for _, a := range c.Args {
			if v, ok := strings.CutPrefix(a, "--allowed-caller="); ok {
				out = append(out, v)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the chart's agent DaemonSet admits no caller (no --allowed-caller)")
	}
	return out, nil
}

// PodOn is a running pod of the chart's component app (its
// app.kubernetes.io/name) on node, or on any node when node is "".
func (in Installed) PodOn(ctx context.Context, app, node string) (*corev1.Pod, error) {
	pods, err := in.Client.CoreV1().Pods(namespaceOf(app)).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + app})
	if err != nil {
		return nil, err
	}
	for i, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil && (node == "" || p.Spec.NodeName == node) {
			return &pods.Items[i], nil
		}
	}
	return nil, fmt.Errorf("no running %s pod on node %q", app, node)
}

// Token is what the kubelet projects into a pod: a token of the
// ServiceAccount sa, bound to pod (and so to its node) when pod is not nil,
// for audiences (nil: the API server's).
func (in Installed) Token(ctx context.Context, sa string, pod *corev1.Pod, audiences []string) (string, error) {
	tr := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: audiences}}
	if pod != nil {
		tr.Spec.BoundObjectRef = &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	got, err := in.Client.CoreV1().ServiceAccounts(namespaceOf(sa)).CreateToken(ctx, sa, tr, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("a token for ServiceAccount %s: %w", sa, err)
	}
	return got.Status.Token, nil
}

// ClientAs authenticates with token only, as a pod's in-cluster client
// does: it has exactly the chart's RBAC for that ServiceAccount.
func (in Installed) ClientAs(token string) (kubernetes.Interface, error) {
	cfg := rest.AnonymousClientConfig(in.Config)
	cfg.BearerToken = token
	return kubernetes.NewForConfig(cfg)
}

// AgentCredentials gives the agent on node what the chart's DaemonSet gives
// it (--tls-csr --token-review): as the agent pod's own ServiceAccount, a
// serving certificate for node and ips from a signing request, and callers
// checked by TokenReview, admitting the callers its --allowed-caller
// arguments name, and istio-cni's token reviewed as itself. It waits until the
// certificate is signed (an orchestrator's agentpki.Signer must run).
func (in Installed) AgentCredentials(ctx context.Context, node string, ips []net.IP, cfg *nodeagent.Config, log *zap.Logger) error {
	if log == nil {
		log = zap.NewNop()
	}
	pod, err := in.PodOn(ctx, "nodewise-agent", node)
	if err != nil {
		return err
	}
	tok, err := in.Token(ctx, "nodewise-agent", pod, nil)
	if err != nil {
		return err
	}
	kube, err := in.ClientAs(tok)
	if err != nil {
		return err
	}
	req, err := agentpki.NewRequester(agentpki.RequesterConfig{Kube: kube, Node: node, IPs: ips, Timeout: time.Minute, Logger: log.Named("certificate")})
	if err != nil {
		return err
	}
	if err := req.Obtain(ctx); err != nil {
		return err
	}
	allowed, err := in.AllowedCallers(ctx)
	if err != nil {
		return err
	}
	rev, err := agentpki.NewReviewer(agentpki.ReviewerConfig{Kube: kube, Allowed: allowed, Logger: log.Named("tokenreview")})
	if err != nil {
		return err
	}
	cfg.CertFile, cfg.KeyFile, cfg.TokenFile = "", "", ""
	cfg.GetCertificate, cfg.Authenticator = req.GetCertificate, rev
	cfg.CNITokenReviews = kube.AuthenticationV1().TokenReviews()
	return nil
}
