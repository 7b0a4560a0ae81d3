package dashboard

import (
	"strings"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// haltView is a halted rollout's banner: the node, the reason (for a
// gate's failure, the node's verdict and its headline), and what
// docs/runbook.md ("When a rollout halts") says to do, with the commands.
type haltView struct {
	Rollout, Node, Reason, Kind, Advice string
	Commands                            []string
}

// buildHalt reads a halted rollout's failed node and the runbook row for
// its cause; nil when the rollout is not halted.
func buildHalt(nr *v1alpha1.NodeRollout) *haltView {
	if nr.Status.Phase != v1alpha1.PhaseHalted {
		return nil
	}
	h := &haltView{Rollout: nr.Name, Reason: nr.Status.HaltReason}
	var failed *v1alpha1.NodeStatus
	for i := range nr.Status.Nodes {
		n := nr.Status.Nodes[i] // a copy: the cached object is never written
		if n.State == v1alpha1.NodeFailed && (failed == nil || strings.Contains(h.Reason, n.Name)) {
			failed = &n
		}
	}
	text := h.Reason
	if failed != nil {
		h.Node = failed.Name
		text += " " + failed.Reason + " " + failed.Verdict
		if h.Reason == "" {
			h.Reason = failed.Reason
		}
		// The banner names the node: its reason leads with the headline.
		h.Reason = strings.TrimPrefix(h.Reason, "node "+failed.Name+": ")
	}
	name, node := nr.Name, h.Node
	if node == "" {
		node = "NODE"
	}
	resume := "nodewise resume " + name
	switch kind := haltKind(failed, text); kind {
	case "gate_failed":
		h.Kind = "the judge found a regression"
		h.Advice = "The node's page has the judge's before/after table. A real regression: roll the upgraded nodes back in reverse order (re-apply the old Istio chart, OnDelete, first), or abort to stop where you are. A false alarm (planned maintenance traffic, say): resume retries the node from preflight."
		h.Commands = []string{"nodewise explain " + name + " --node " + node, "nodewise rollback " + name, "nodewise abort " + name, resume}
	case "swap_timeout":
		h.Kind = "the new pod never got Ready"
		h.Advice = "Describe the istio-system pods on that node. Under surge the old ztunnel is still serving. Fix the cause (image, config), then resume."
		h.Commands = []string{"kubectl -n istio-system get pods -o wide --field-selector spec.nodeName=" + node, resume}
	case "pdb_blocked":
		h.Kind = "a PodDisruptionBudget refused the drain"
		h.Advice = "Find the PodDisruptionBudget in the reason; scale the workload or relax the budget, then resume; or set drain.pdbBlocked: skip-node."
		h.Commands = []string{"kubectl get pdb -A", resume}
	case "preflight_failed":
		h.Kind = "the preflight failed"
		h.Advice = "An unreachable agent or a baseline not full points at the node agent; a skew error names the component and versions: upgrade istiod first. Then resume."
		h.Commands = []string{"kubectl -n nodewise-system get pods -o wide --field-selector spec.nodeName=" + node, resume}
	default:
		h.Kind = "an eviction failed"
		h.Advice = "The reason names the pod; fix it, then resume."
		h.Commands = []string{"nodewise status " + name, resume}
	}
	return h
}

// haltKind tells the runbook's halt reasons apart from what the status
// keeps (the reason label of nodewise_rollout_halts_total is not persisted).
func haltKind(failed *v1alpha1.NodeStatus, text string) string {
	t := strings.ToLower(text)
	switch {
	case failed != nil && strings.HasPrefix(failed.Verdict, string(v1alpha1.OutcomeFail)), strings.Contains(t, "gate "):
		return "gate_failed"
	case strings.Contains(t, "swap timeout"):
		return "swap_timeout"
	case strings.Contains(t, "disruptionbudget"):
		return "pdb_blocked"
	case strings.Contains(t, "preflight"), strings.Contains(t, "skew"), strings.Contains(t, "baseline"), strings.Contains(t, "agent"):
		return "preflight_failed"
	}
	return "drain_failed"
}
