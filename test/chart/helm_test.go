package chart

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiext "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/testkit"
)

// TestChartLintRejectsUnknownValues: values.schema.json makes `helm lint
// --strict` (and install, upgrade, template) refuse a misspelt value instead
// of ignoring it, and a wrong type.
func TestChartLintRejectsUnknownValues(t *testing.T) {
	ctx := context.Background()
	if out, err := HelmRun(ctx, "", "lint", "--strict", ChartDir(), "--kube-version", KubeVersion); err != nil {
		t.Fatalf("the defaults do not lint: %v\n%s", err, out)
	}
	for _, tc := range []struct{ set, want string }{
		{"orchestrator.replcas=3", "replcas"},
		{"agent.nodeSelektor.pool=a", "nodeSelektor"},
		{"imagePullSecret[0].name=x", "imagePullSecret"},
		{"probe.image.digest=latest", "digest"},
		{"agent.mode=bpf", "mode"},
	} {
		out, err := HelmRun(ctx, "", "lint", "--strict", ChartDir(), "--kube-version", KubeVersion, "--set", tc.set)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("helm lint --strict --set %s: %v; want a failure naming %q:\n%s", tc.set, err, tc.want, out)
		}
	}
}

// TestChartInstallAndUpgrade installs the chart package with Helm onto the
// simulated cluster, as a platform would: with a UID the platform assigns,
// extra pod annotations, an image pinned by digest, and no Istio namespace
// yet. Then, from the previous chart package (0.1.0, CRDs in crds/, here with
// one CRD field removed so its schema is older), an upgrade to this package
// must update the CRDs, and later upgrades need nothing special.
func TestChartInstallAndUpgrade(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Nodes: 2})
	ctx := context.Background()
	ext, err := apiext.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pkg, err := Package(ctx, ChartDir(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(pkg) != "nodewise-0.2.0.tgz" {
		t.Fatalf("package %s, want nodewise-0.2.0.tgz", pkg)
	}
	if _, err := c.Client.CoreV1().Namespaces().Get(ctx, cluster.IstioNamespace, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the simulated cluster already has %s (%v): the test needs it absent", cluster.IstioNamespace, err)
	}
	const uid, digest = "1000650000", "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	helm := func(args ...string) {
		t.Helper()
		if out, err := HelmRun(ctx, c.Kubeconfig, args...); err != nil {
			t.Fatal(err)
		} else {
			t.Logf("helm %s:\n%s", args[0], out)
		}
	}
	helm("install", "nodewise", pkg, "-n", Namespace, "--create-namespace",
		"--set", "createIstioNamespace=true",
		"--set", "orchestrator.podSecurityContext.runAsUser="+uid,
		"--set", "podAnnotations.example\\.com/team=mesh",
		"--set", "orchestrator.image.digest="+digest)
	testkit.WaitFor(t, 2*time.Minute, "a running orchestrator pod with the UID, the annotation and the digest", func() (bool, error) {
		pods, err := c.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=nodewise-orchestrator"})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			sc := p.Spec.SecurityContext
			if p.Status.Phase == corev1.PodRunning && sc != nil && sc.RunAsUser != nil && *sc.RunAsUser == 1000650000 &&
				p.Annotations["example.com/team"] == "mesh" && p.Spec.Containers[0].Image == "ghcr.io/nodewise/orchestrator:v0.2.0@"+digest {
				return true, nil
			}
		}
		return false, nil
	})
	testkit.WaitFor(t, 2*time.Minute, "agents on both nodes with the global annotation", func() (bool, error) {
		ds, err := c.Client.AppsV1().DaemonSets(AgentNamespace).Get(ctx, "nodewise-agent", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return ds.Status.NumberReady == 2 && ds.Spec.Template.Annotations["example.com/team"] == "mesh" && ds.Spec.Template.Spec.NodeSelector["kubernetes.io/os"] == "linux", nil
	})
	// Uninstalling keeps the CRDs (and so every rollout) and the Istio namespace.
	chartCRDs := []string{"noderollouts.nodewise.io", "revisionmigrations.nodewise.io", "podagepolicies.nodewise.io"}
	helm("uninstall", "nodewise", "-n", Namespace)
	for _, name := range chartCRDs {
		if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatalf("helm uninstall deleted CRD %s (want it kept): %v", name, err)
		}
	}
	if _, err := c.Client.CoreV1().Namespaces().Get(ctx, cluster.IstioNamespace, metav1.GetOptions{}); err != nil {
		t.Fatalf("helm uninstall deleted the Istio namespace it created: %v", err)
	}

	// The upgrade path: start over from the previous package, once the
	// probe's namespace (the release's) is gone.
	testkit.WaitFor(t, 2*time.Minute, "the probe's namespace to be deleted", func() (bool, error) {
		_, err := c.Client.CoreV1().Namespaces().Get(ctx, "nodewise-probe", metav1.GetOptions{})
		return apierrors.IsNotFound(err), err
	})
	for _, name := range chartCRDs {
		if err := ext.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The API server's CRD finalizer can stall on a deletion until its
	// 5-minute resync: a List of the instances refused with "storage is
	// (re)initializing" (deleting the sibling CRD rebuilds the group) is
	// retried, the retry meets a stale cache and a Conflict and gives up, and
	// the update it waits for changes only the Terminating condition, which it
	// ignores (apiextensions-apiserver v0.37.2, crd_finalizer.go). Labelling
	// such a CRD is a change it does not ignore.
	nudges := 0
	testkit.WaitFor(t, 2*time.Minute, "the CRDs to be gone", func() (bool, error) {
		l, err := ext.ApiextensionsV1().CustomResourceDefinitions().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, crd := range l.Items {
			for _, c := range crd.Status.Conditions {
				if c.Type == apiextv1.Terminating && c.Reason == "InstanceDeletionFailed" {
					nudges++
					patch := fmt.Sprintf(`{"metadata":{"labels":{"example.com/requeue":"%d"}}}`, nudges)
					if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Patch(ctx, crd.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
						return false, err
					}
					t.Logf("CRD %s: %s; labelled to requeue its finalizer", crd.Name, c.Message)
				}
			}
		}
		return len(l.Items) == 0, nil
	})
	prev, err := PreviousChart(ctx, filepath.Join(dir, "previous"))
	if err != nil {
		t.Fatal(err)
	}
	olderCRD(t, filepath.Join(prev, "crds", "nodewise.io_noderollouts.yaml"))
	oldPkg, err := Package(ctx, prev, filepath.Join(dir, "previous"))
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(oldPkg) != "nodewise-0.1.0.tgz" {
		t.Fatalf("previous package %s, want nodewise-0.1.0.tgz", oldPkg)
	}
	helm("install", "nodewise", oldPkg, "-n", Namespace)
	if hasMaintenanceWindows(t, ext) {
		t.Fatal("the previous package's CRD already has spec.maintenanceWindows: the test cannot tell an upgrade")
	}
	// The first upgrade from 0.1.x adopts the CRDs that crds/ installed
	// (docs/runbook.md, Upgrading nodewise).
	helm("upgrade", "nodewise", pkg, "-n", Namespace, "--take-ownership")
	if !hasMaintenanceWindows(t, ext) {
		t.Fatal("helm upgrade to the new package left the old CRD schema (no spec.maintenanceWindows)")
	}
	crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, "noderollouts.nodewise.io", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if crd.Annotations["helm.sh/resource-policy"] != "keep" || crd.Annotations["meta.helm.sh/release-name"] != "nodewise" {
		t.Fatalf("the upgraded CRD's annotations %v: want it owned by the release and kept on uninstall", crd.Annotations)
	}
	// From here on, a plain upgrade updates them.
	helm("upgrade", "nodewise", pkg, "-n", Namespace, "--reuse-values")
}

// olderCRD removes spec.maintenanceWindows from the NodeRollout CRD at path:
// the previous package then carries an older schema than this one.
func olderCRD(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var out []string
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) != "maintenanceWindows:" {
			out = append(out, l)
			continue
		}
		indent := len(l) - len(strings.TrimLeft(l, " "))
		for i+1 < len(lines) && (strings.TrimSpace(lines[i+1]) == "" || len(lines[i+1])-len(strings.TrimLeft(lines[i+1], " ")) > indent) {
			i++
		}
	}
	if len(out) == len(lines) {
		t.Fatalf("%s has no maintenanceWindows to remove", path)
	}
	if err := os.WriteFile(path, []byte(strings.Join(out, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
}

func hasMaintenanceWindows(t *testing.T, ext apiext.Interface) bool {
	t.Helper()
	crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(context.Background(), "noderollouts.nodewise.io", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range crd.Spec.Versions {
		if v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			continue
		}
		spec := v.Schema.OpenAPIV3Schema.Properties["spec"]
		if _, ok := spec.Properties["maintenanceWindows"]; ok {
			return true
		}
	}
	return false
}

// TestChartWorkloadOverrides renders the values every workload takes:
// security contexts, pod labels and annotations, affinity, tolerations,
// nodeSelector, extra volumes, pull Secrets (the probe's own), the
// priority-class quota, the Istio namespace and the CRD switches.
func TestChartWorkloadOverrides(t *testing.T) {
	objs := render(t,
		"podLabels.team=mesh", "podAnnotations.example\\.com/owner=platform",
		"revisions.podSecurityContext.runAsUser=null", "revisions.podAnnotations.example\\.com/owner=sidecars",
		"orchestrator.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=pool",
		"orchestrator.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
		"orchestrator.extraVolumes[0].name=ca", "orchestrator.extraVolumes[0].configMap.name=agent-ca",
		"orchestrator.extraVolumeMounts[0].name=ca", "orchestrator.extraVolumeMounts[0].mountPath=/etc/ca",
		"agent.tolerations[0].key=dedicated", "agent.tolerations[0].operator=Exists",
		"probe.nodeSelector.pool=general", "imagePullSecrets[0].name=mirror", "probe.imagePullSecrets[0].name=probe-mirror",
		"priorityClassQuota.enabled=true", "createIstioNamespace=true", "crds.keep=false")
	pod := func(kind, ns, name string) map[string]any {
		o := objs[kind+" "+ns+"/"+name]
		if o == nil {
			t.Fatalf("%s %s/%s not rendered", kind, ns, name)
		}
		tmpl, _, _ := unstructured.NestedMap(o.Object, "spec", "template")
		return tmpl
	}
	str := func(m map[string]any, path ...string) string {
		v, _, _ := unstructured.NestedFieldNoCopy(m, path...)
		if v == nil {
			return ""
		}
		b, _ := json.Marshal(v)
		return string(b)
	}
	orch := pod("Deployment", Namespace, "nodewise-orchestrator")
	rev := pod("Deployment", Namespace, "nodewise-revisions")
	agent := pod("DaemonSet", AgentNamespace, "nodewise-agent")
	probe := pod("DaemonSet", "nodewise-probe", "nodewise-probe")
	for name, p := range map[string]map[string]any{"orchestrator": orch, "revisions": rev, "agent": agent, "probe": probe} {
		if str(p, "metadata", "labels", "team") != `"mesh"` || str(p, "metadata", "labels", "app.kubernetes.io/part-of") != `"nodewise"` {
			t.Errorf("%s: pod labels %s", name, str(p, "metadata", "labels"))
		}
	}
	if str(orch, "metadata", "annotations", "example.com/owner") != `"platform"` || str(rev, "metadata", "annotations", "example.com/owner") != `"sidecars"` {
		t.Errorf("pod annotations: orchestrator %s, revisions %s", str(orch, "metadata", "annotations"), str(rev, "metadata", "annotations"))
	}
	if str(orch, "metadata", "annotations", "prometheus.io/scrape") != `"true"` {
		t.Error("podAnnotations replaced the chart's own annotations")
	}
	if got := str(rev, "spec", "securityContext"); strings.Contains(got, "runAsUser") || !strings.Contains(got, `"runAsNonRoot":true`) {
		t.Errorf("revisions.podSecurityContext.runAsUser=null: %s", got)
	}
	if got := str(orch, "spec", "affinity"); !strings.Contains(got, "nodeAffinity") || strings.Contains(got, "podAntiAffinity") {
		t.Errorf("orchestrator.affinity: %s", got)
	}
	if got := str(rev, "spec", "affinity"); !strings.Contains(got, "podAntiAffinity") {
		t.Errorf("revisions lost its default anti-affinity: %s", got)
	}
	if !strings.Contains(str(orch, "spec", "volumes"), `"agent-ca"`) || !strings.Contains(str(orch, "spec", "containers"), `"/etc/ca"`) {
		t.Errorf("orchestrator extraVolumes/extraVolumeMounts: %s", str(orch, "spec", "volumes"))
	}
	if got := str(agent, "spec", "tolerations"); got != `[{"key":"dedicated","operator":"Exists"}]` {
		t.Errorf("agent.tolerations: %s", got)
	}
	if got := str(agent, "spec", "nodeSelector"); got != `{"kubernetes.io/os":"linux"}` {
		t.Errorf("agent nodeSelector %s, want the linux default", got)
	}
	if got := str(probe, "spec", "nodeSelector"); !strings.Contains(got, `"pool":"general"`) || !strings.Contains(got, `"kubernetes.io/os":"linux"`) {
		t.Errorf("probe.nodeSelector: %s", got)
	}
	if str(probe, "spec", "imagePullSecrets") != `[{"name":"probe-mirror"}]` || str(orch, "spec", "imagePullSecrets") != `[{"name":"mirror"}]` {
		t.Errorf("imagePullSecrets: probe %s, orchestrator %s", str(probe, "spec", "imagePullSecrets"), str(orch, "spec", "imagePullSecrets"))
	}
	for _, k := range []string{"ResourceQuota " + Namespace + "/nodewise-critical-pods", "ResourceQuota nodewise-probe/nodewise-critical-pods", "Namespace /" + cluster.IstioNamespace} {
		if objs[k] == nil {
			t.Errorf("%s not rendered", k)
		}
	}
	if ann := objs["Namespace /"+cluster.IstioNamespace].GetAnnotations(); ann["helm.sh/resource-policy"] != "keep" {
		t.Errorf("the Istio namespace is not kept on uninstall: %v", ann)
	}
	crd := objs["CustomResourceDefinition /noderollouts.nodewise.io"]
	if crd == nil {
		t.Fatal("the NodeRollout CRD is not rendered as a template")
	}
	if _, keep := crd.GetAnnotations()["helm.sh/resource-policy"]; keep {
		t.Error("crds.keep=false still annotates the CRDs keep")
	}
	if def := render(t); def["CustomResourceDefinition /noderollouts.nodewise.io"].GetAnnotations()["helm.sh/resource-policy"] != "keep" {
		t.Error("the CRDs are not kept on uninstall by default")
	}
	if none := render(t, "crds.enabled=false"); none["CustomResourceDefinition /noderollouts.nodewise.io"] != nil {
		t.Error("crds.enabled=false still renders the CRDs")
	}
}
