// Package kubeconfig loads the Kubernetes client configuration the way kubectl
// does: a KUBECONFIG list of files, --context, impersonation, and the in-cluster
// config when nothing else is set. The CLI and the orchestrator share it, so a
// kubeconfig that works for one works for the other.
package kubeconfig

import (
	"errors"
	"fmt"
	"os"

	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
)

// DefaultRequestTimeout bounds every CLI request, so a server that accepts the
// connection but never answers fails the command instead of hanging it.
const DefaultRequestTimeout = "30s"

// ErrNoConfig is returned when no kubeconfig names a cluster and the process
// runs outside a cluster: client-go would otherwise dial localhost:8080.
var ErrNoConfig = errors.New("no cluster configured: set KUBECONFIG, pass --kubeconfig, or run inside a cluster")

// NewFlags returns kubectl's connection flags (--kubeconfig, --context, -n,
// --as, --request-timeout ...) with nodewise's default request timeout.
func NewFlags() *genericclioptions.ConfigFlags {
	f := genericclioptions.NewConfigFlags(true)
	t := DefaultRequestTimeout
	f.Timeout = &t
	return f
}

// Load returns the configuration for a long-running process: path (empty:
// $KUBECONFIG, then ~/.kube/config, then in-cluster) with no request timeout,
// since watches stay open.
func Load(path string) (*rest.Config, error) {
	f := genericclioptions.NewConfigFlags(false)
	f.KubeConfig = &path
	return RESTConfig(f)
}

// RESTConfig resolves the flags into a rest.Config, refusing the silent
// localhost:8080 fallback.
func RESTConfig(f *genericclioptions.ConfigFlags) (*rest.Config, error) {
	loader := f.ToRawKubeConfigLoader()
	raw, err := loader.RawConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	explicitServer := f.APIServer != nil && *f.APIServer != ""
	if len(raw.Clusters) == 0 && !explicitServer && !inCluster() {
		return nil, ErrNoConfig
	}
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	return cfg, nil
}

func inCluster() bool {
	return os.Getenv("KUBERNETES_SERVICE_HOST") != "" && os.Getenv("KUBERNETES_SERVICE_PORT") != ""
}
