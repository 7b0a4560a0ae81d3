package cluster

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestIstiodEnvIsTheChartsLiterals: pilot-discovery gets the literal
// environment of the chart's discovery container, its own pod's identity in
// place of the downward API, and no KUBECONFIG (the chart's names a remote
// cluster's mounted secret, which would override --kubeconfig).
func TestIstiodEnvIsTheChartsLiterals(t *testing.T) {
	dep := unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "istiod-1-28", "namespace": "istio-system"},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{
			map[string]any{"name": "other", "env": []any{map[string]any{"name": "NOT_MINE", "value": "x"}}},
			map[string]any{"name": "discovery", "env": []any{
				map[string]any{"name": "REVISION", "value": "1-28"},
				map[string]any{"name": "POD_NAME", "valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "metadata.name"}}},
				map[string]any{"name": "KUBECONFIG", "value": "/var/run/secrets/remote/config"},
				map[string]any{"name": "INJECTION_WEBHOOK_CONFIG_NAME", "value": "istio-sidecar-injector-1-28"},
				map[string]any{"name": "EMPTY", "value": ""},
			}},
		}}}},
	}}
	other := dep.DeepCopy()
	other.SetName("istiod-1-29")
	env, err := istiodEnv([]unstructured.Unstructured{*other, dep}, "1-28")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"POD_NAME=istiod-1-28-local", "POD_NAMESPACE=istio-system", "SERVICE_ACCOUNT=istiod-1-28",
		"REVISION=1-28", "INJECTION_WEBHOOK_CONFIG_NAME=istio-sidecar-injector-1-28", "EMPTY="}
	if !slices.Equal(env, want) {
		t.Fatalf("env %q, want %q", env, want)
	}
	if _, err := istiodEnv([]unstructured.Unstructured{*other}, "1-28"); err == nil {
		t.Fatal("no error when the chart rendered no istiod-1-28 Deployment")
	}
}
