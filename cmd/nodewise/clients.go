package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/buildinfo"
	"github.com/nodewise/nodewise/kubeconfig"
)

// globalFlags are kubectl's connection flags (--kubeconfig, --context, -n,
// --as, --request-timeout ...), shared by every command that talks to a cluster.
type globalFlags struct {
	conn *genericclioptions.ConfigFlags
}

func newGlobalFlags() *globalFlags { return &globalFlags{conn: kubeconfig.NewFlags()} }

// restConfig resolves the connection flags.
func (g *globalFlags) restConfig() (*rest.Config, error) {
	cfg, err := kubeconfig.RESTConfig(g.conn)
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "nodewise/" + buildinfo.Version()
	return cfg, nil
}

// namespace is -n when given, else def (nodewise's own resources are
// cluster-scoped; -n only says where nodewise itself runs).
func (g *globalFlags) namespace(def string) string {
	if g.conn.Namespace != nil && *g.conn.Namespace != "" {
		return *g.conn.Namespace
	}
	return def
}

// dynamic is a client for objects nodewise has no typed client of (Gateway
// API's Gateways, Istio's policies).
func (g *globalFlags) dynamic() (dynamic.Interface, error) {
	cfg, err := g.restConfig()
	if err != nil {
		return nil, err
	}
	return dynamic.NewForConfig(cfg)
}

func (g *globalFlags) kube() (kubernetes.Interface, error) {
	cfg, err := g.restConfig()
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building the Kubernetes client: %w", err)
	}
	return kube, nil
}

// rolloutClients builds the Kubernetes and NodeRollout clients from the global flags.
func rolloutClients(g *globalFlags) (kubernetes.Interface, v1alpha1.NodeRolloutInterface, error) {
	cfg, err := g.restConfig()
	if err != nil {
		return nil, nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("building the Kubernetes client: %w", err)
	}
	nwc, err := v1alpha1.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	return kube, nwc.NodeRollouts(), nil
}

// errCRDsMissing replaces the API server's "the server could not find the
// requested resource" when nodewise.io is not served at all.
var errCRDsMissing = errors.New("nodewise CRDs are not installed: run `kubectl apply --server-side -k deploy/crds` (from a nodewise checkout) or install the nodewise Helm chart")

// clarify turns a nodewise request's error into one line a person can act
// on: missing CRDs, a server that does not answer.
func (g *globalFlags) clarify(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if apierrors.IsNotFound(err) && !g.groupServed(ctx) {
		return errCRDsMissing
	}
	var uerr *url.Error
	if errors.As(err, &uerr) && uerr.Timeout() {
		return fmt.Errorf("%s (the API server did not answer within --request-timeout=%s)", firstLine(err.Error()), *g.conn.Timeout)
	}
	return err
}

// groupServed reports whether the API server serves nodewise.io/v1alpha1;
// when that cannot be told, it says yes, so the original error is shown.
func (g *globalFlags) groupServed(_ context.Context) bool {
	cfg, err := g.restConfig()
	if err != nil {
		return true
	}
	d, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return true
	}
	_, err = d.ServerResourcesForGroupVersion(v1alpha1.GroupVersion.String())
	return err == nil || !apierrors.IsNotFound(err)
}

// nodewise builds the nodewise.io client from the global flags.
func (g *globalFlags) nodewise() (*v1alpha1.Client, error) {
	cfg, err := g.restConfig()
	if err != nil {
		return nil, err
	}
	return v1alpha1.NewForConfig(cfg)
}
