// Package argocd ships nodewise's Argo CD settings: a Lua health check per
// kind, laid out as Argo CD's own resource_customizations
// (nodewise.io/<Kind>/health.lua), the Namespace fields a RevisionMigration
// owns (ignoreDifferences), and argocd-cm.yaml, the patch of Argo CD's
// argocd-cm ConfigMap that installs them.
package argocd

import (
	"embed"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

//go:embed nodewise.io/*/health.lua argocd-cm.yaml
var files embed.FS

// Group is the API group of nodewise's kinds.
const Group = "nodewise.io"

// Kinds are the kinds with a health check.
var Kinds = []string{"NodeRollout", "RevisionMigration"}

// HealthScript is the Lua health check of kind.
func HealthScript(kind string) (string, error) {
	b, err := files.ReadFile(Group + "/" + kind + "/health.lua")
	if err != nil {
		return "", fmt.Errorf("no Argo CD health check for %s: %w", kind, err)
	}
	return string(b), nil
}

// ConfigMapKey is the key of argocd-cm that Argo CD reads kind's health check from.
func ConfigMapKey(kind string) string {
	return "resource.customizations.health." + Group + "_" + kind
}

// ConfigMapPatch is argocd-cm.yaml: the patch of Argo CD's argocd-cm that
// installs every health check.
func ConfigMapPatch() []byte {
	b, _ := files.ReadFile("argocd-cm.yaml") // embedded: it is there
	return b
}

// NamespaceIgnoreDifferencesKey is the key of argocd-cm that holds the
// ignoreDifferences of every Namespace (a core kind: no group).
const NamespaceIgnoreDifferencesKey = "resource.customizations.ignoreDifferences.Namespace"

// IgnoreDifferences is Argo CD's ignoreDifferences customization, as
// argocd-cm carries it.
type IgnoreDifferences struct {
	JSONPointers          []string `json:"jsonPointers,omitempty"`
	JQPathExpressions     []string `json:"jqPathExpressions,omitempty"`
	ManagedFieldsManagers []string `json:"managedFieldsManagers,omitempty"`
}

// NamespaceIgnoreDifferences is what argocd-cm.yaml tells Argo CD to ignore
// on Namespaces: the labels a RevisionMigration writes.
func NamespaceIgnoreDifferences() (IgnoreDifferences, error) {
	var cm corev1.ConfigMap
	if err := yaml.Unmarshal(ConfigMapPatch(), &cm); err != nil {
		return IgnoreDifferences{}, fmt.Errorf("argocd-cm.yaml: %w", err)
	}
	var d IgnoreDifferences
	if err := yaml.UnmarshalStrict([]byte(cm.Data[NamespaceIgnoreDifferencesKey]), &d); err != nil {
		return IgnoreDifferences{}, fmt.Errorf("argocd-cm.yaml %s: %w", NamespaceIgnoreDifferencesKey, err)
	}
	return d, nil
}
