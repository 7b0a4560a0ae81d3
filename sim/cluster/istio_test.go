package cluster

import (
	"strings"
	"testing"
	"time"

	"k8s.io/kubectl/pkg/util/podutils"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestRevision(t *testing.T) {
	for in, want := range map[string]string{"1.27.3": "1-27", "1.28.1-rst": "1-28", "2.0.0": "2-0"} {
		if got, err := Revision(in); err != nil || got != want {
			t.Errorf("Revision(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "1.27", "v1.27.3", "1.27.3_x", "latest"} {
		if _, err := Revision(bad); err == nil {
			t.Errorf("Revision(%q) accepted a malformed version", bad)
		}
	}
}

func imagesOf(pods []corev1.Pod) map[string]int {
	out := map[string]int{}
	for _, p := range pods {
		out[p.Spec.Containers[0].Image]++
	}
	return out
}

func allReady(n int) func([]corev1.Pod) bool {
	return func(pods []corev1.Pod) bool {
		ready := 0
		for i := range pods {
			if podutils.IsPodReady(&pods[i]) && pods[i].DeletionTimestamp == nil {
				ready++
			}
		}
		return ready == n && len(pods) == n
	}
}

// The fixtures install Istio shaped like its charts, and installing another
// version moves the DaemonSet templates as a Helm upgrade would: under
// OnDelete nothing restarts, under RollingUpdate the DaemonSet controller
// replaces the pods.
func TestInstallIstioAndUpgradeTemplates(t *testing.T) {
	c := Start(t, Options{Nodes: 4, Zones: 2})
	ctx := testContext(t, 4*time.Minute)
	if err := InstallIstio(ctx, c.Client, IstioOptions{Version: "1.27.3"}); err != nil {
		t.Fatal(err)
	}
	zt := waitPods(t, ctx, c.Client, IstioNamespace, "app=ztunnel", allReady(4))
	waitPods(t, ctx, c.Client, IstioNamespace, "k8s-app=istio-cni-node", allReady(4))
	if imgs := imagesOf(zt); imgs["docker.io/istio/ztunnel:1.27.3"] != 4 {
		t.Fatalf("ztunnel images %v", imgs)
	}
	ds, err := c.Client.AppsV1().DaemonSets(IstioNamespace).Get(ctx, ZtunnelName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := ds.Spec.Template.Spec
	env := map[string]string{}
	for _, e := range spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	if ds.Spec.UpdateStrategy.Type != appsv1.OnDeleteDaemonSetStrategyType || *spec.TerminationGracePeriodSeconds != 30 ||
		spec.PriorityClassName != "system-node-critical" || env["TERMINATION_GRACE_PERIOD_SECONDS"] != "30" {
		t.Errorf("ztunnel DaemonSet not shaped like the chart: strategy %s grace %d priority %q env %v",
			ds.Spec.UpdateStrategy.Type, *spec.TerminationGracePeriodSeconds, spec.PriorityClassName, env)
	}
	for _, ns := range []string{"shop", "payments", "catalog", "ledger"} {
		n, err := c.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Labels["istio.io/dataplane-mode"] != "ambient" && n.Labels["istio.io/rev"] != "default" {
			t.Errorf("sample namespace %s is neither ambient nor on the default tag: %v", ns, n.Labels)
		}
	}
	waitPods(t, ctx, c.Client, "shop", "app=cart", allReady(3))
	tag, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "istio-revision-tag-default", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tag.Labels["istio.io/tag"] != "default" || tag.Labels["istio.io/rev"] != "1-27" {
		t.Errorf("default tag labels %v", tag.Labels)
	}

	// Helm upgrade to 1.28.1, still OnDelete: templates move, pods do not.
	if err := InstallIstio(ctx, c.Client, IstioOptions{Version: "1.28.1"}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"istiod-1-27", "istiod-1-28"} {
		if _, err := c.Client.AppsV1().Deployments(IstioNamespace).Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	ds, err = c.Client.AppsV1().DaemonSets(IstioNamespace).Get(ctx, ZtunnelName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if img := ds.Spec.Template.Spec.Containers[0].Image; img != "docker.io/istio/ztunnel:1.28.1" {
		t.Fatalf("template image after upgrade: %s", img)
	}
	revs, err := c.Client.AppsV1().ControllerRevisions(IstioNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=ztunnel"})
	if err != nil {
		t.Fatal(err)
	}
	if len(revs.Items) != 2 {
		t.Errorf("ztunnel has %d ControllerRevisions, want 2 (1.27.3 and 1.28.1)", len(revs.Items))
	}
	time.Sleep(3 * time.Second) // the DaemonSet controller has synced the new template by now
	if imgs := imagesOf(waitPods(t, ctx, c.Client, IstioNamespace, "app=ztunnel", allReady(4))); imgs["docker.io/istio/ztunnel:1.27.3"] != 4 {
		t.Fatalf("under OnDelete the pods changed: %v", imgs)
	}
	tag, _ = c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "istio-revision-tag-default", metav1.GetOptions{})
	if tag.Labels["istio.io/rev"] != "1-27" {
		t.Errorf("an upgrade moved the default tag to %s", tag.Labels["istio.io/rev"])
	}

	// Switching to RollingUpdate lets the DaemonSet controller replace them.
	if err := InstallIstio(ctx, c.Client, IstioOptions{Version: "1.28.1", UpdateStrategy: appsv1.RollingUpdateDaemonSetStrategyType}); err != nil {
		t.Fatal(err)
	}
	waitPods(t, ctx, c.Client, IstioNamespace, "app=ztunnel", func(pods []corev1.Pod) bool {
		return allReady(4)(pods) && imagesOf(pods)["docker.io/istio/ztunnel:1.28.1"] == 4
	})
	if err := InstallIstio(ctx, c.Client, IstioOptions{Version: "1.28"}); err == nil || !strings.Contains(err.Error(), "1.27.3") {
		t.Errorf("malformed version accepted or unclear error: %v", err)
	}
}

// TestInstallIstioControlPlaneOnly: with ControlPlaneOnly the fixtures install
// istiod and its revision tag, which the skew preflight reads, and no
// data-plane DaemonSet (their images would land on a real node unpullable).
func TestInstallIstioControlPlaneOnly(t *testing.T) {
	ctx := testContext(t, 10*time.Second)
	client := fake.NewClientset()
	if err := InstallIstio(ctx, client, IstioOptions{Version: "1.28.1", ControlPlaneOnly: true, SkipSamples: true}); err != nil {
		t.Fatal(err)
	}
	dss, err := client.AppsV1().DaemonSets(IstioNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(dss.Items) != 0 {
		t.Errorf("ControlPlaneOnly installed %d DaemonSets, want none", len(dss.Items))
	}
	if _, err := client.AppsV1().Deployments(IstioNamespace).Get(ctx, "istiod-1-28", metav1.GetOptions{}); err != nil {
		t.Errorf("no istiod: %v", err)
	}
	if _, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "istio-revision-tag-default", metav1.GetOptions{}); err != nil {
		t.Errorf("no default revision tag: %v", err)
	}
}
