// Package argocd ships nodewise's Argo CD health checks: a Lua script per
// kind, laid out as Argo CD's own resource_customizations
// (nodewise.io/<Kind>/health.lua), and argocd-cm.yaml, the patch of Argo CD's
// argocd-cm ConfigMap that installs them.
package argocd

import (
	"embed"
	"fmt"
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
