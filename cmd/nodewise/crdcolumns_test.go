package main

import (
	"os"
	"path/filepath"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// Every nodewise CRD is listed by `kubectl get nodewise` and shows its Age,
// as kubectl users expect of any resource.
func TestCRDsHaveTheNodewiseCategoryAndAge(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "deploy", "crds", "nodewise.io_*.yaml"))
	if err != nil || len(files) < 2 {
		t.Fatalf("CRD manifests: %v %v", files, err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(data, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		hasCategory := false
		for _, c := range crd.Spec.Names.Categories {
			hasCategory = hasCategory || c == "nodewise"
		}
		if !hasCategory {
			t.Errorf("%s: categories %v lack nodewise", crd.Name, crd.Spec.Names.Categories)
		}
		for _, v := range crd.Spec.Versions {
			age := false
			for _, c := range v.AdditionalPrinterColumns {
				age = age || (c.Name == "Age" && c.Type == "date" && c.JSONPath == ".metadata.creationTimestamp")
			}
			if !age {
				t.Errorf("%s %s: no Age printer column", crd.Name, v.Name)
			}
		}
	}
}
