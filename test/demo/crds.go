package demo

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// crdFile is the NodeRollout CRD, relative to the repository root.
const crdFile = "deploy/crds/nodewise.io_noderollouts.yaml"

// FindCRDDir returns the directory holding the CRDs: deploy/crds under the
// working directory or under the parent of the executable's directory
// (bin/nodewise → repository root), whichever has them.
func FindCRDDir() (string, error) {
	var roots []string
	if wd, err := os.Getwd(); err == nil {
		roots = append(roots, wd)
	}
	if exe, err := os.Executable(); err == nil {
		roots = append(roots, filepath.Dir(filepath.Dir(exe)))
	}
	for _, r := range roots {
		if _, err := os.Stat(filepath.Join(r, crdFile)); err == nil {
			return filepath.Join(r, filepath.Dir(crdFile)), nil
		}
	}
	return "", fmt.Errorf("%s not found under %v: run the demo from the repository root (make demo)", crdFile, roots)
}

// installCRD creates the NodeRollout CRD and waits until it is established.
func installCRD(ctx context.Context, cfg *rest.Config, dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, filepath.Base(crdFile)))
	if err != nil {
		return fmt.Errorf("reading the NodeRollout CRD: %w", err)
	}
	crd := &apiextv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(data, crd); err != nil {
		return fmt.Errorf("parsing the NodeRollout CRD: %w", err)
	}
	ax, err := apiextclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	crds := ax.ApiextensionsV1().CustomResourceDefinitions()
	if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating CRD %s: %w", crd.Name, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := crds.Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
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
