package planner

import (
	"fmt"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// TargetsInNamespace refuses targets outside ns, the Istio namespace
// (Config.IstioNamespace, --istio-namespace). The orchestrator's RBAC lets it
// delete pods, and create and hand over surge bridges, only there (the Role
// nodewise-orchestrator-dataplane and the surge Role, deploy/orchestrator),
// so a target elsewhere would be refused mid-swap, on a cordoned node. One
// orchestrator swaps one namespace's data plane; a second namespace needs
// its own orchestrator (its own --istio-namespace and Roles there).
func TargetsInNamespace(targets []v1alpha1.TargetRef, ns string) error {
	for i, t := range targets {
		if t.Namespace != ns {
			return fmt.Errorf("spec.targets[%d] %s/%s: not in the Istio namespace %s, the only one where this orchestrator may delete and create pods (--istio-namespace, and its RBAC Roles there)",
				i, t.Namespace, t.Name, ns)
		}
	}
	return nil
}
