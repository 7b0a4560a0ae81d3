package clusters

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// FromContexts is a Cluster for each named context of the kubeconfig the
// rules load (all of its contexts when names is empty), named by context.
// A name the kubeconfig does not hold is an error, before anything is read.
func FromContexts(rules *clientcmd.ClientConfigLoadingRules, names []string) ([]Cluster, error) {
	raw, err := rules.Load()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	if len(names) == 0 {
		for name := range raw.Contexts {
			names = append(names, name)
		}
		slices.Sort(names)
		if len(names) == 0 {
			return nil, fmt.Errorf("the kubeconfig has no contexts")
		}
	}
	out := make([]Cluster, 0, len(names))
	for _, name := range names {
		if _, ok := raw.Contexts[name]; !ok {
			return nil, fmt.Errorf("context %q is not in the kubeconfig (it has %d: see kubectl config get-contexts)", name, len(raw.Contexts))
		}
		cfg, err := clientcmd.NewNonInteractiveClientConfig(*raw, name, &clientcmd.ConfigOverrides{}, rules).ClientConfig()
		out = append(out, Cluster{Name: name, Config: cfg, Err: err})
	}
	return out, nil
}

// SecretKeys are the data keys a cluster Secret's kubeconfig is read from,
// in order: Cluster API's ("value", in <cluster>-kubeconfig Secrets) and
// the plain "kubeconfig".
var SecretKeys = []string{"value", "kubeconfig"}

// FromSecrets is a Cluster for each Secret in namespace that selector
// matches, each holding a kubeconfig (SecretKeys) whose current context is
// the cluster; named by the Secret. A Secret without a usable kubeconfig
// is a Cluster with its error, so the report shows it.
func FromSecrets(ctx context.Context, kube kubernetes.Interface, namespace, selector string) ([]Cluster, error) {
	list, err := kube.CoreV1().Secrets(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("listing the cluster Secrets in %s (selector %q): %w", namespace, selector, err)
	}
	out := make([]Cluster, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, FromSecret(&list.Items[i]))
	}
	slices.SortFunc(out, func(a, b Cluster) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// FromSecret is the cluster whose kubeconfig the Secret holds (SecretKeys),
// named by the Secret; its Err says why it has none.
func FromSecret(s *corev1.Secret) Cluster {
	c := Cluster{Name: s.Name}
	var data []byte
	for _, k := range SecretKeys {
		if data = s.Data[k]; len(data) > 0 {
			break
		}
	}
	var err error
	if len(data) == 0 {
		c.Err = fmt.Errorf("Secret %s/%s holds no kubeconfig (data key %q or %q)", s.Namespace, s.Name, SecretKeys[0], SecretKeys[1])
	} else if c.Config, err = secretConfig(data); err != nil {
		c.Err = fmt.Errorf("Secret %s/%s: %w", s.Namespace, s.Name, err)
	}
	return c
}

// secretConfig reads a Secret's kubeconfig. Credential plugins (exec,
// auth-provider) are refused: whoever can write the Secret would choose a
// command for every reader to run.
func secretConfig(data []byte) (*rest.Config, error) {
	raw, err := clientcmd.Load(data)
	if err != nil {
		return nil, err
	}
	for name, a := range raw.AuthInfos {
		if a.Exec != nil || a.AuthProvider != nil {
			return nil, fmt.Errorf("user %q takes its credentials from a plugin (exec or auth-provider), which a Secret's kubeconfig may not use: put a token or a client certificate in it", name)
		}
	}
	return clientcmd.NewDefaultClientConfig(*raw, &clientcmd.ConfigOverrides{}).ClientConfig()
}
