package chart

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestChartRevisionsInjectionURLs: the chart renders revisions.injectionURLs
// and istioNamespace into the nodewise-revisions policy's variables, as CEL
// literals, and its schema refuses a prefix that would allow more than the
// operator's injection path (no slash after the host, http, user info, a
// path not ending in a slash).
func TestChartRevisionsInjectionURLs(t *testing.T) {
	const remote = "https://istiod.remote.example:15017/inject/"
	objs := render(t, "istioNamespace=mesh", "revisions.injectionURLs={"+remote+",https://10.0.0.7/inject/cluster/west/net/n1/}")
	policy := objs["ValidatingAdmissionPolicy /nodewise-revisions"]
	if policy == nil {
		t.Fatal("the chart renders no ValidatingAdmissionPolicy nodewise-revisions")
	}
	vars, _, _ := unstructured.NestedSlice(policy.Object, "spec", "variables")
	got := map[string]string{}
	for _, v := range vars {
		m := v.(map[string]any)
		got[m["name"].(string)], _ = m["expression"].(string)
	}
	want := map[string]string{
		"istioNamespace": `"mesh"`,
		"injectionURLs":  `["` + remote + `","https://10.0.0.7/inject/cluster/west/net/n1/"]`,
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("variable %s: %q, want %q", k, got[k], w)
		}
	}

	ctx := context.Background()
	for _, bad := range []string{
		"https://istiod.remote.example",              // istiod.remote.example.evil.example would match
		"https://istiod.remote.example:15017/inject", // /injectx would match
		"http://istiod.remote.example/inject/",
		"https://user@istiod.remote.example/inject/",
		"https://istiod.remote.example/inject/?a=/",
	} {
		out, err := HelmRun(ctx, "", "lint", "--strict", ChartDir(), "--kube-version", KubeVersion, "--set", "revisions.injectionURLs={"+bad+"}")
		if err == nil || !strings.Contains(out, "injectionURLs") {
			t.Errorf("revisions.injectionURLs={%s}: %v; want helm lint to refuse it, naming injectionURLs:\n%s", bad, err, out)
		}
	}
}

// TestChartPromotionSecrets: orchestrator.promotionSecrets and
// revisions.promotionSecrets let each controller, under its own
// ServiceAccount's Role, get the named kubeconfig Secrets and no other;
// unset, neither Role names them.
func TestChartPromotionSecrets(t *testing.T) {
	getsSecrets := func(objs map[string]*unstructured.Unstructured, role string) []string {
		t.Helper()
		r := objs["Role nodewise-system/"+role]
		if r == nil {
			t.Fatalf("the chart renders no Role %s", role)
		}
		rules, _, _ := unstructured.NestedSlice(r.Object, "rules")
		var names []string
		for _, rule := range rules {
			m := rule.(map[string]any)
			res, _, _ := unstructured.NestedStringSlice(m, "resources")
			verbs, _, _ := unstructured.NestedStringSlice(m, "verbs")
			if strings.Join(res, ",") == "secrets" && strings.Join(verbs, ",") == "get" {
				n, _, _ := unstructured.NestedStringSlice(m, "resourceNames")
				names = append(names, n...)
			}
		}
		return names
	}
	for _, c := range []struct{ value, role string }{
		{"orchestrator.promotionSecrets", "nodewise-orchestrator-leader"},
		{"revisions.promotionSecrets", "nodewise-revisions-leader"},
	} {
		if got := getsSecrets(render(t, c.value+"={staging-kubeconfig,qa-kubeconfig}"), c.role); strings.Join(got, ",") != "staging-kubeconfig,qa-kubeconfig" {
			t.Errorf("%s: Role %s gets Secrets %v, want exactly staging-kubeconfig, qa-kubeconfig", c.value, c.role, got)
		}
		if got := getsSecrets(render(t), c.role); len(got) > 0 {
			t.Errorf("%s unset: Role %s gets Secrets %v", c.value, c.role, got)
		}
	}
}
