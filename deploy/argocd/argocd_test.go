package argocd

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// TestConfigMapPatchCarriesEachScript: argocd-cm.yaml patches Argo CD's
// argocd-cm, and holds, under the key Argo CD reads for each kind, exactly
// that kind's health.lua, and nothing else: the two stay one script.
func TestConfigMapPatchCarriesEachScript(t *testing.T) {
	var cm corev1.ConfigMap
	if err := yaml.UnmarshalStrict(ConfigMapPatch(), &cm); err != nil {
		t.Fatalf("argocd-cm.yaml: %v", err)
	}
	if cm.Kind != "ConfigMap" || cm.Name != "argocd-cm" || cm.Namespace != "argocd" {
		t.Errorf("argocd-cm.yaml patches %s %s/%s, want ConfigMap argocd/argocd-cm", cm.Kind, cm.Namespace, cm.Name)
	}
	if len(cm.Data) != len(Kinds)+1 {
		t.Errorf("argocd-cm.yaml has %d keys, want one per kind (%v) and %s", len(cm.Data), Kinds, NamespaceIgnoreDifferencesKey)
	}
	for _, kind := range Kinds {
		script, err := HealthScript(kind)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := cm.Data[ConfigMapKey(kind)]
		switch {
		case !ok:
			t.Errorf("argocd-cm.yaml has no key %s", ConfigMapKey(kind))
		case got != script:
			t.Errorf("argocd-cm.yaml's %s differs from %s/%s/health.lua: copy the script into it (indented four spaces)", ConfigMapKey(kind), Group, kind)
		}
	}
}
