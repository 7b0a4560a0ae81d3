package cluster

import (
	"context"
	"fmt"
	"os"
	"time"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/yaml"
)

// InstallCRD creates the CustomResourceDefinition in the YAML file at path
// (an existing one is left as it is) and waits until the API server serves it.
func InstallCRD(ctx context.Context, cfg *rest.Config, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading CRD: %w", err)
	}
	crd := &apiextv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(data, crd); err != nil {
		return fmt.Errorf("parsing CRD %s: %w", path, err)
	}
	return installCRD(ctx, cfg, crd)
}

// installCRD creates crd (an existing one is left as it is) and waits until
// the API server serves it: InstallCRD's, and a rendered chart's CRDs.
func installCRD(ctx context.Context, cfg *rest.Config, crd *apiextv1.CustomResourceDefinition) error {
	ax, err := apiextclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	crds := ax.ApiextensionsV1().CustomResourceDefinitions()
	if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("the API server refused CRD %s: %w", crd.Name, err)
	}
	// Watch the one CRD until it is Established (a list, then its changes).
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err = watchtools.UntilWithSync(wctx, ListWatch(crds.List, crds.Watch, ByName(crd.Name)), &apiextv1.CustomResourceDefinition{}, nil, func(e watch.Event) (bool, error) {
		got, ok := e.Object.(*apiextv1.CustomResourceDefinition)
		if !ok || e.Type == watch.Deleted {
			return false, nil
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextv1.Established && c.Status == apiextv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for CRD %s to be established: %w", crd.Name, err)
	}
	return nil
}
