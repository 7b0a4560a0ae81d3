package demo

import (
	"context"
	"strings"
	"testing"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/sim/dataplane"
)

// TestLiveBadTokenCNIBuildHaltsAtCanary: istio-cni's own health on the live
// data plane. A healthy istio-cni build rolled onto one node passes, with
// the agent's check of its config, kubeconfig, token and plugin version in
// the verdict. A -badtoken build (its kubeconfig's token is refused by the
// API server) rolled onto another halts at that canary, the node failed on
// the token check naming the kubeconfig, while the judge's traffic verdict
// on the same node was Pass: traffic alone would have passed it.
func TestLiveBadTokenCNIBuildHaltsAtCanary(t *testing.T) {
	t.Parallel()
	e := newLiveEnv(t, 3)
	ctx := context.Background()
	setCNI := func(tag string) {
		t.Helper()
		if err := cluster.SetImageTag(ctx, e.c.Client, cluster.CNIName, tag); err != nil {
			t.Fatal(err)
		}
		if err := waitTemplateObserved(ctx, e.c, cluster.CNIName); err != nil {
			t.Fatal(err)
		}
	}

	setCNI("1.27.4")
	nr := e.rolloutOn("cni-healthy", "node-001", v1alpha1.DrainNever, v1alpha1.InconclusivePass)
	ns := nodeStatus(t, nr, "node-001")
	t.Logf("healthy verdict: %s", ns.Verdict)
	if nr.Status.Phase != v1alpha1.PhaseCompleted || !strings.HasPrefix(ns.Verdict, "Pass") {
		t.Fatalf("healthy istio-cni build: rollout %s (%s), verdict %q", nr.Status.Phase, nr.Status.HaltReason, ns.Verdict)
	}
	for _, want := range []string{"istio-cni on node node-001: config ok", "token ok", "the API server accepted the token as system:serviceaccount:istio-system:istio-cni", "plugin ok", "version 1.27.4"} {
		if !strings.Contains(strings.Join(ns.Detail, "; "), want) {
			t.Errorf("the healthy verdict's detail does not report %q", want)
		}
	}

	setCNI("1.27.5" + dataplane.TagBadToken)
	node := "node-002"
	nr = e.rolloutOn("cni-badtoken", node, v1alpha1.DrainNever, v1alpha1.InconclusivePass)
	ns = nodeStatus(t, nr, node)
	t.Logf("halt reason: %s", nr.Status.HaltReason)
	t.Logf("verdict: %s", ns.Verdict)
	if nr.Status.Phase != v1alpha1.PhaseHalted || ns.State != v1alpha1.NodeFailed {
		t.Fatalf("rollout %s, node %s %s (verdict %q): want Halted at the canary %s", nr.Status.Phase, node, ns.State, ns.Verdict, node)
	}
	detail := strings.Join(ns.Detail, "; ")
	if !strings.HasPrefix(ns.Verdict, "Fail: istio-cni check token failed on ZZZ-istio-cni-kubeconfig: the API server refused the token") ||
		!strings.Contains(detail, "istio-cni on node "+node+": check token failed on ") ||
		!strings.Contains(detail, "/ZZZ-istio-cni-kubeconfig: the API server refused the token") {
		t.Errorf("want the token check and the kubeconfig named: verdict %q, detail %q", ns.Verdict, detail)
	}
	if !strings.Contains(detail, "(the gate alone said: Pass") || ns.Judgement == nil || ns.Judgement.Regressions != 0 {
		t.Errorf("want the judge's traffic verdict Pass with no regression beside it: %q, judgement %+v", detail, ns.Judgement)
	}
	if !strings.Contains(nr.Status.HaltReason, node) || !strings.Contains(nr.Status.HaltReason, "ZZZ-istio-cni-kubeconfig") {
		t.Errorf("the halt reason names neither the node nor the file: %q", nr.Status.HaltReason)
	}
}
