package main

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// rolloutClients builds the Kubernetes and NodeRollout clients from the global flags.
func rolloutClients(g *globalFlags) (kubernetes.Interface, v1alpha1.NodeRolloutInterface, error) {
	cfg, err := restConfig(g)
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

func restConfig(g *globalFlags) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = g.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w (use --offline for plan without a cluster)", err)
	}
	return cfg, nil
}
