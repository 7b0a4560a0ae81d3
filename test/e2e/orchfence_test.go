package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/locks"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/prepull"
	"github.com/nodewise/nodewise/orchestrator/swap"
	"github.com/nodewise/nodewise/sim/cluster"
)

// TestOrchestratorFenceBeyondItsPodSpecs: with the chart's RBAC and
// admission policies, the orchestrator's ServiceAccount
//   - creates bridges and pre-pull pods with no label a Service could select
//     but the ztunnel template's own (a bridge labelled app=istiod would
//     take istiod's traffic);
//   - deletes in the Istio namespace only the data plane's pods, its bridges
//     and its pre-pull pods, not istiod's;
//   - patches of a node only the cordon and its own annotations: no taint,
//     label, foreign annotation, owner reference or finalizer.
//
// Its own writes (the real bridge and pre-pull pods, their deletion and the
// data-plane pod's, a cordon with a step record) pass.
func TestOrchestratorFenceBeyondItsPodSpecs(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, 1)
	applyChartFence(t, e.c)
	ctx := context.Background()
	as, err := kubernetes.NewForConfig(asChartOrchestrator(e.c))
	if err != nil {
		t.Fatal(err)
	}
	pods := as.CoreV1().Pods(ns)
	const node = "node-001"
	zero := int64(0)
	del := metav1.DeleteOptions{GracePeriodSeconds: &zero}
	dryDel := metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}
	created := func(p *corev1.Pod, err error) {
		t.Helper()
		if err == nil {
			_ = e.c.Client.CoreV1().Pods(ns).Delete(ctx, p.Name, del)
		}
	}

	// Creates: labels.
	in, err := swap.ObserveSurge(ctx, e.c.Client, ztunnelRef, node)
	if err != nil {
		t.Fatal(err)
	}
	anchor := e.ztunnelPod(node)
	istiodLabelled := swap.BridgePod(in.DaemonSet, in.Revision, node, anchor)
	istiodLabelled.Name += "-istiod"
	istiodLabelled.Labels["app"] = "istiod"
	extra := swap.BridgePod(in.DaemonSet, in.Revision, node, anchor)
	extra.Name += "-extra"
	extra.Labels["istio.io/rev"] = "default"
	var missing *corev1.Pod
	for k := range in.DaemonSet.Spec.Template.Labels {
		missing = swap.BridgePod(in.DaemonSet, in.Revision, node, anchor)
		missing.Name += "-missing"
		delete(missing.Labels, k)
		break
	}
	nr := rollout("fence", func(s *v1alpha1.NodeRolloutSpec) { s.Prepull = true })
	e.apply(nr)
	if nr, err = e.rollouts.Get(ctx, nr.Name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	prepullLabelled := prepull.Pod(nr, node, e.targetView(cluster.ZtunnelName))
	prepullLabelled.Name += "-istiod"
	prepullLabelled.Labels["app"] = "istiod"
	for what, p := range map[string]*corev1.Pod{
		"a bridge labelled app=istiod":             istiodLabelled,
		"a bridge with a label of its own":         extra,
		"a bridge without a label of the template": missing,
	} {
		made, err := pods.Create(ctx, p, metav1.CreateOptions{})
		created(made, err)
		if err == nil || !strings.Contains(err.Error(), "a surge bridge carries only the ztunnel DaemonSet's pod template labels") {
			t.Errorf("creating %s as the orchestrator: %v; want refused by its labels", what, err)
		}
	}
	made, err := pods.Create(ctx, prepullLabelled, metav1.CreateOptions{})
	created(made, err)
	if err == nil || !strings.Contains(err.Error(), "a pre-pull pod carries no label but") {
		t.Errorf("creating a pre-pull pod labelled app=istiod as the orchestrator: %v; want refused by its labels", err)
	}

	// Deletes: an istiod pod (made by the admin) is refused; the data
	// plane's pods, the real bridge and pre-pull pod pass (dry run: the
	// admission chain runs, nothing is deleted).
	istiod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "istiod-fence", Namespace: ns, Labels: map[string]string{"app": "istiod"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "discovery", Image: "docker.io/istio/pilot:1.27.3"}}}}
	if _, err := e.c.Client.CoreV1().Pods(ns).Create(ctx, istiod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(ctx, istiod.Name, dryDel); err == nil || !strings.Contains(err.Error(), "the orchestrator may delete only the data plane's pods") {
		t.Errorf("deleting istiod's pod as the orchestrator: %v; want refused", err)
	}
	bridge, err := pods.Create(ctx, swap.BridgePod(in.DaemonSet, in.Revision, node, anchor), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the real bridge as the orchestrator: %v", err)
	}
	prepull, err := pods.Create(ctx, prepull.Pod(nr, node, e.targetView(cluster.CNIName)), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the real pre-pull pod as the orchestrator: %v", err)
	}
	all, err := e.c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	cni := ""
	for _, p := range all.Items {
		if dsOf(&p) == cluster.CNIName {
			cni = p.Name
		}
	}
	for _, name := range []string{anchor.Name, cni, bridge.Name, prepull.Name} {
		if err := pods.Delete(ctx, name, dryDel); err != nil {
			t.Errorf("deleting %s as the orchestrator: %v", name, err)
		}
	}

	// Node patches.
	nodes := as.CoreV1().Nodes()
	refused := map[string]string{
		"a taint":                   `{"spec":{"taints":[{"key":"evil","effect":"NoExecute"}]}}`,
		"a label":                   `{"metadata":{"labels":{"node-role.kubernetes.io/istiod":""}}}`,
		"a label removed":           `{"metadata":{"labels":{"kubernetes.io/hostname":null}}}`,
		"another annotation":        `{"metadata":{"annotations":{"cluster-autoscaler.kubernetes.io/scale-down-disabled":"true"}}}`,
		"keep-cordoned":             `{"metadata":{"annotations":{"nodewise.io/keep-cordoned":"mine"}}}`,
		"an owner reference":        `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"gone","uid":"6b3c5f2e-0000-4000-8000-000000000000"}]}}`,
		"a finalizer":               `{"metadata":{"finalizers":["example.com/hold"]}}`,
		"the providerID":            `{"spec":{"providerID":"evil://1"}}`,
		"a cordon with a new taint": `{"spec":{"unschedulable":true,"taints":[{"key":"evil","effect":"NoSchedule"}]}}`,
	}
	for what, patch := range refused {
		if _, err := nodes.Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err == nil || !strings.Contains(err.Error(), "the orchestrator may") {
			t.Errorf("patching %s onto %s as the orchestrator: %v; want refused by the policy", what, node, err)
		}
	}
	own := `{"metadata":{"annotations":{"nodewise.io/step":"Cordon","swapped.nodewise.io/ztunnel":"x"}},"spec":{"unschedulable":true}}`
	if _, err := nodes.Patch(ctx, node, types.MergePatchType, []byte(own), metav1.PatchOptions{}); err != nil {
		t.Errorf("the orchestrator's cordon and step record: %v", err)
	}
	undo := `{"metadata":{"annotations":{"nodewise.io/step":null,"swapped.nodewise.io/ztunnel":null}},"spec":{"unschedulable":false}}`
	if _, err := nodes.Patch(ctx, node, types.MergePatchType, []byte(undo), metav1.PatchOptions{}); err != nil {
		t.Errorf("the orchestrator's uncordon and record cleared: %v", err)
	}
	n, err := e.c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	evil := slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == "evil" })
	if evil || n.Labels["node-role.kubernetes.io/istiod"] != "" || len(n.OwnerReferences) != 0 || n.Annotations[model.AnnotationKeepCordoned] != "" {
		t.Errorf("node %s after the refused patches: taints %v, labels %v, owners %v, annotations %v", node, n.Spec.Taints, n.Labels, n.OwnerReferences, n.Annotations)
	}

	// Node status patches: its own lifecycle conditions, nothing else.
	e.setCondition(node, corev1.NodeCondition{Type: corev1.NodeDrainInProgress, Status: corev1.ConditionTrue, Reason: "FirmwareUpdate"}) // another writer's
	cond := func(typ, status, reason string) string {
		return fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":%q,"reason":%q}]}}`, typ, status, reason)
	}
	statusRefused := map[string]string{
		"Ready False":                         cond("Ready", "False", locks.ReasonInFlight),
		"another writer's condition replaced": cond("DrainInProgress", "True", locks.ReasonDraining),
		"another writer's condition removed":  `{"status":{"conditions":[{"type":"DrainInProgress","$patch":"delete"}]}}`,
		"a lifecycle condition not its own":   cond("MaintenanceInProgress", "True", "FirmwareUpdate"),
		"another condition type":              cond("NetworkUnavailable", "True", locks.ReasonInFlight),
		"the capacity":                        `{"status":{"capacity":{"pods":"1"}}}`,
		"a label through status":              `{"metadata":{"labels":{"node-role.kubernetes.io/istiod":""}}}`,
	}
	for what, patch := range statusRefused {
		if _, err := nodes.Patch(ctx, node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err == nil || !strings.Contains(err.Error(), "the orchestrator may") {
			t.Errorf("patching %s onto %s's status as the orchestrator: %v; want refused by the policy", what, node, err)
		}
	}
	if _, err := nodes.Patch(ctx, node, types.StrategicMergePatchType, []byte(cond("MaintenanceInProgress", "True", locks.ReasonInFlight)), metav1.PatchOptions{}, "status"); err != nil {
		t.Errorf("the orchestrator's MaintenanceInProgress: %v", err)
	}
	if _, err := nodes.Patch(ctx, node, types.StrategicMergePatchType, []byte(`{"status":{"conditions":[{"type":"MaintenanceInProgress","$patch":"delete"}]}}`), metav1.PatchOptions{}, "status"); err != nil {
		t.Errorf("the orchestrator's MaintenanceInProgress removed: %v", err)
	}
	cs := e.conditions(node)
	if r, d := cs[corev1.NodeReady], cs[corev1.NodeDrainInProgress]; r.Status != corev1.ConditionTrue || d.Reason != "FirmwareUpdate" || d.Status != corev1.ConditionTrue {
		t.Errorf("node %s after the refused status patches: Ready %+v, DrainInProgress %+v", node, r, d)
	}
}
