package chart

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/testkit"
)

// helmLabels are the labels only the chart sets; everything else must match
// the kustomize base exactly.
var helmLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"}

func render(t *testing.T, set ...string) map[string]*unstructured.Unstructured {
	t.Helper()
	objs, err := Template(context.Background(), set...)
	if err != nil {
		t.Fatal(err)
	}
	return byKey(t, objs)
}

func byKey(t *testing.T, objs []*unstructured.Unstructured) map[string]*unstructured.Unstructured {
	t.Helper()
	out := map[string]*unstructured.Unstructured{}
	for _, o := range objs {
		if _, dup := out[Key(o)]; dup {
			t.Fatalf("%s rendered twice", Key(o))
		}
		out[Key(o)] = o
	}
	return out
}

// normal is the object as JSON values, without the chart's own labels.
func normal(t *testing.T, o *unstructured.Unstructured) any {
	t.Helper()
	c := o.DeepCopy()
	labels := c.GetLabels()
	for _, k := range helmLabels {
		delete(labels, k)
	}
	c.SetLabels(labels)
	// The chart keeps its CRDs on uninstall (the kustomize base is never uninstalled).
	if ann := c.GetAnnotations(); ann != nil {
		delete(ann, "helm.sh/resource-policy")
		if len(ann) == 0 {
			ann = nil
		}
		c.SetAnnotations(ann)
	}
	b, err := json.Marshal(c.Object)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// firstDiff names the first path where a and b differ.
func firstDiff(a, b any, path string) string {
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			return path
		}
		keys := map[string]bool{}
		for k := range av {
			keys[k] = true
		}
		for k := range bv {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			if d := firstDiff(av[k], bv[k], path+"."+k); d != "" {
				return d
			}
		}
		return ""
	case []any:
		bv, ok := b.([]any)
		if !ok || len(av) != len(bv) {
			return fmt.Sprintf("%s (length %d vs %v)", path, len(av), lenOf(b))
		}
		for i := range av {
			if d := firstDiff(av[i], bv[i], path+"["+strconv.Itoa(i)+"]"); d != "" {
				return d
			}
		}
		return ""
	default:
		if !reflect.DeepEqual(a, b) {
			return fmt.Sprintf("%s (chart %v, kustomize %v)", path, a, b)
		}
		return ""
	}
}

func lenOf(v any) any {
	if l, ok := v.([]any); ok {
		return len(l)
	}
	return v
}

// TestChartDefaultsMatchKustomizeBase renders the chart with its defaults (and
// the Namespace object, which `helm install --create-namespace` makes instead)
// and kustomize's deploy/, and requires the same objects, field for field,
// apart from the chart's own labels: the two install paths never drift.
func TestChartDefaultsMatchKustomizeBase(t *testing.T) {
	chart := render(t, "createNamespace=true")
	kobjs, err := Kustomize()
	if err != nil {
		t.Fatal(err)
	}
	kust := byKey(t, kobjs)
	for k := range kust {
		if _, ok := chart[k]; !ok {
			t.Errorf("%s is in deploy/ but the chart does not render it", k)
		}
	}
	for k, c := range chart {
		if c.GetAnnotations()["helm.sh/hook"] == "test" {
			continue // `helm test` pods exist only in the chart
		}
		ko, ok := kust[k]
		if !ok {
			t.Errorf("the chart renders %s, which deploy/ lacks", k)
			continue
		}
		if d := firstDiff(normal(t, c), normal(t, ko), ""); d != "" {
			t.Errorf("%s differs between the chart and deploy/ at %s", k, d)
		}
	}
	if len(chart) < 20 {
		t.Errorf("the chart rendered only %d objects", len(chart))
	}
}

// TestChartHelmTestHook: `helm test` runs a pod of the orchestrator's image,
// as its ServiceAccount, that asks every node agent for a snapshot with the
// orchestrator's kind of credentials (orchestrator --check-agents); without
// the judge there are no agent credentials and no test pod.
func TestChartHelmTestHook(t *testing.T) {
	objs := render(t, "orchestrator.image.digest=sha256:"+strings.Repeat("a", 64))
	pod := objs["Pod "+Namespace+"/nodewise-test-agents"]
	if pod == nil {
		t.Fatal("no helm test pod rendered")
	}
	if hook := pod.GetAnnotations()["helm.sh/hook"]; hook != "test" {
		t.Fatalf("helm.sh/hook %q, want test", hook)
	}
	sa, _, _ := unstructured.NestedString(pod.Object, "spec", "serviceAccountName")
	containers, _, _ := unstructured.NestedSlice(pod.Object, "spec", "containers")
	orch, _, _ := unstructured.NestedSlice(objs["Deployment "+Namespace+"/nodewise-orchestrator"].Object, "spec", "template", "spec", "containers")
	c := containers[0].(map[string]any)
	args := fmt.Sprint(c["args"])
	if sa != "nodewise-orchestrator" || c["image"] != orch[0].(map[string]any)["image"] || !strings.Contains(c["image"].(string), "@sha256:") {
		t.Errorf("test pod runs %v as %q, want the orchestrator's image (digest included) as nodewise-orchestrator", c["image"], sa)
	}
	for _, want := range []string{"--check-agents", "--namespace=" + Namespace, "--agent-ca=/var/run/secrets/nodewise.io/agent-ca/ca.crt", "--agent-token-file=", "--agent-verify-node-name"} {
		if !strings.Contains(args, want) {
			t.Errorf("test pod args %s lack %s", args, want)
		}
	}
	if restart, _, _ := unstructured.NestedString(pod.Object, "spec", "restartPolicy"); restart != "Never" {
		t.Errorf("restartPolicy %q: a failed check must end the pod, not retry", restart)
	}
	if render(t, "judge.enabled=false")["Pod "+Namespace+"/nodewise-test-agents"] != nil {
		t.Error("judge.enabled=false still renders the agents' helm test")
	}
}

// TestChartCopiesMatchSources: Helm reads only files inside the chart, so the
// chart carries copies of the generated CRDs and the dashboards. They must be
// byte-for-byte the sources (make chart-sync copies them).
func TestChartCopiesMatchSources(t *testing.T) {
	root := testkit.RepoRoot()
	pairs := map[string]string{
		"deploy/nodeagent/nodewise-node-health.json": "dashboards/nodewise-node-health.json",
		"deploy/orchestrator/nodewise-rollouts.json": "dashboards/nodewise-rollouts.json",
	}
	crds, err := filepath.Glob(filepath.Join(root, "deploy", "crds", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range crds {
		if filepath.Base(c) == "kustomization.yaml" {
			continue
		}
		pairs[filepath.Join("deploy", "crds", filepath.Base(c))] = filepath.Join("files", "crds", filepath.Base(c))
	}
	if len(pairs) < 4 {
		t.Fatalf("found only %d files to compare", len(pairs))
	}
	for src, cp := range pairs {
		a, err := os.ReadFile(filepath.Join(root, src))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(ChartDir(), cp))
		if err != nil {
			t.Errorf("the chart lacks %s (copy of %s): run make chart-sync", cp, src)
			continue
		}
		if !bytes.Equal(a, b) {
			t.Errorf("deploy/charts/nodewise/%s differs from %s: run make chart-sync", cp, src)
		}
	}
}

// metricRef is a nodewise_ metric name in a PromQL expression.
var metricRef = regexp.MustCompile(`nodewise_[a-z0-9_]+`)

// exportedMetrics are the metric names the product code declares as string
// literals (orchestrator, health, revisions, istio/inventory, nodeagent),
// plus the node agent's per-pod family, which it names by concatenation.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	literal := regexp.MustCompile(`^"(nodewise_[a-z0-9_]+)"$`)
	for _, dir := range []string{"orchestrator", "health", "revisions", "istio", "nodeagent", "leader"} {
		err := filepath.WalkDir(filepath.Join(testkit.RepoRoot(), dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if bl, ok := n.(*ast.BasicLit); ok && bl.Kind == token.STRING {
					if m := literal.FindStringSubmatch(bl.Value); m != nil {
						names[m[1]] = true
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"nodewise_rollout_nodes", "nodewise_rollout_halts_total", "nodewise_judgements_total", "nodewise_proxy_pods"} {
		if !names[n] {
			t.Fatalf("the source scan missed %s: it finds nothing", n)
		}
	}
	return names
}

// dashboardPanel is the part of a Grafana panel the metric check reads.
type dashboardPanel struct {
	Title   string
	Targets []struct{ Expr string }
	Panels  []dashboardPanel
}

// TestAlertsAndRolloutDashboardUseExportedMetrics: every nodewise_ metric the
// PrometheusRule and the rollout dashboard query is one the code declares
// (histogram series by their family), so a renamed metric fails here rather
// than silently emptying a panel or an alert.
func TestAlertsAndRolloutDashboardUseExportedMetrics(t *testing.T) {
	exported := exportedMetrics(t)
	objs := render(t, "monitoring.prometheusRule.enabled=true")
	rule, ok := objs["PrometheusRule "+Namespace+"/nodewise"]
	if !ok {
		t.Fatal("monitoring.prometheusRule.enabled=true rendered no PrometheusRule")
	}
	var exprs []string
	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	alerts := map[string]bool{}
	for _, g := range groups {
		rules, _, _ := unstructured.NestedSlice(g.(map[string]any), "rules")
		for _, r := range rules {
			rm := r.(map[string]any)
			alerts[rm["alert"].(string)] = true
			exprs = append(exprs, rm["expr"].(string))
		}
	}
	for _, a := range []string{"NodewiseRolloutHalted", "NodewiseMigrationHalted", "NodewiseNodeStuckInStep", "NodewiseAgentDown", "NodewiseProxiesOutsideSkew"} {
		if !alerts[a] {
			t.Errorf("alert %s missing", a)
		}
	}
	dash, err := os.ReadFile(filepath.Join(ChartDir(), "dashboards", "nodewise-rollouts.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct{ Panels []dashboardPanel }
	if err := json.Unmarshal(dash, &d); err != nil {
		t.Fatalf("rollout dashboard: %v", err)
	}
	var walk func([]dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				exprs = append(exprs, tg.Expr)
			}
			walk(p.Panels) // a collapsed row's
		}
	}
	walk(d.Panels)
	seen := 0
	for _, e := range exprs {
		for _, m := range metricRef.FindAllString(e, -1) {
			seen++
			base := m
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(m, suf); ok && exported[b] {
					base = b
				}
			}
			if !exported[base] {
				t.Errorf("%s is queried but no nodewise code exports it (in %q)", m, e)
			}
		}
	}
	if seen < 15 {
		t.Errorf("only %d metric references found in the rules and the dashboard", seen)
	}
}

// TestChartValues checks the switches a platform engineer reaches for.
func TestChartValues(t *testing.T) {
	objs := render(t, "image.tag=v9.9.9", "judge.enabled=false", "monitoring.podMonitor.enabled=true", "monitoring.serviceMonitor.enabled=true")
	ds := objs["DaemonSet "+AgentNamespace+"/nodewise-agent"]
	if ds == nil {
		t.Fatal("no agent DaemonSet")
	}
	containers, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
	c := containers[0].(map[string]any)
	if c["image"] != "ghcr.io/nodewise/nodeagent:v9.9.9" {
		t.Errorf("agent image %v, want the image.tag override", c["image"])
	}
	args := fmt.Sprint(c["args"])
	if !strings.Contains(args, "--token-file=") || strings.Contains(args, "--tls-csr") {
		t.Errorf("judge.enabled=false: agent args %s, want the static Secret credentials", args)
	}
	if !strings.Contains(args, "--mesh=auto") {
		t.Errorf("agent args %s, want the proof of enrollment on by default (--mesh=auto)", args)
	}
	off := render(t, "agent.mesh=off")
	containers, _, _ = unstructured.NestedSlice(off["DaemonSet "+AgentNamespace+"/nodewise-agent"].Object, "spec", "template", "spec", "containers")
	if args := fmt.Sprint(containers[0].(map[string]any)["args"]); !strings.Contains(args, "--mesh=off") {
		t.Errorf("agent.mesh=off: agent args %s", args)
	}
	// The agent gets only the capabilities its mode and mesh need, and any
	// the values add.
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{nil, "[BPF PERFMON SYS_PTRACE SYS_ADMIN NET_ADMIN]"},
		{[]string{"agent.mesh=off"}, "[BPF PERFMON]"},
		{[]string{"agent.mode=proc"}, "[SYS_PTRACE SYS_ADMIN NET_ADMIN]"},
		{[]string{"agent.mode=proc", "agent.mesh=off"}, "[]"},
		{[]string{"agent.mesh=off", "agent.securityContext.capabilities.add={NET_RAW,BPF}"}, "[BPF PERFMON NET_RAW]"},
	} {
		containers, _, _ := unstructured.NestedSlice(render(t, tc.set...)["DaemonSet "+AgentNamespace+"/nodewise-agent"].Object, "spec", "template", "spec", "containers")
		add, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "securityContext", "capabilities", "add")
		drop, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "securityContext", "capabilities", "drop")
		if got := fmt.Sprint(add); got != tc.want || fmt.Sprint(drop) != "[ALL]" {
			t.Errorf("%v: the agent adds capabilities %s and drops %v, want %s and ALL", tc.set, got, drop, tc.want)
		}
	}
	// The host paths are read-only and created by no one but istio-cni's run
	// dir (an empty dir where istio-cni is not installed); the cgroup tree is
	// mounted only for eBPF (mode=proc names pods through /proc alone).
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{nil, "[/sys/fs/cgroup:Directory /proc:Directory /etc/cni/net.d:Directory /opt/cni/bin:Directory /var/run/istio-cni:DirectoryOrCreate]"},
		{[]string{"agent.mode=proc"}, "[/proc:Directory /etc/cni/net.d:Directory /opt/cni/bin:Directory /var/run/istio-cni:DirectoryOrCreate]"},
		{[]string{"agent.cni.runDir="}, "[/sys/fs/cgroup:Directory /proc:Directory /etc/cni/net.d:Directory /opt/cni/bin:Directory]"},
	} {
		spec, _, _ := unstructured.NestedMap(render(t, tc.set...)["DaemonSet "+AgentNamespace+"/nodewise-agent"].Object, "spec", "template", "spec")
		var paths []string
		for _, v := range spec["volumes"].([]any) {
			if hp, ok := v.(map[string]any)["hostPath"].(map[string]any); ok {
				paths = append(paths, fmt.Sprintf("%s:%s", hp["path"], hp["type"]))
			}
		}
		for _, m := range spec["containers"].([]any)[0].(map[string]any)["volumeMounts"].([]any) {
			if m.(map[string]any)["readOnly"] != true {
				t.Errorf("%v: agent mount %v is writable", tc.set, m)
			}
		}
		if got := fmt.Sprint(paths); got != tc.want {
			t.Errorf("%v: the agent's host paths %s, want %s", tc.set, got, tc.want)
		}
	}
	// A renamed ztunnel (and a second one) gets its own surge binding, and
	// pre-pull pods for every data-plane DaemonSet.
	dp := render(t, "dataPlane.ztunnel={ztunnel-a,ztunnel-b}", "dataPlane.istioCNI={cni}")
	for _, k := range []string{"ValidatingAdmissionPolicyBinding /nodewise-surge-bridge-ztunnel-a", "ValidatingAdmissionPolicyBinding /nodewise-surge-bridge-ztunnel-b",
		"ValidatingAdmissionPolicyBinding /nodewise-prepull-cni", "ValidatingAdmissionPolicyBinding /nodewise-prepull-ztunnel-b"} {
		if dp[k] == nil {
			t.Errorf("dataPlane values: %s not rendered", k)
		}
	}
	if dp["ValidatingAdmissionPolicyBinding /nodewise-surge-bridge-ztunnel"] != nil || dp["ValidatingAdmissionPolicyBinding /nodewise-prepull-istio-cni-node"] != nil {
		t.Error("dataPlane values: the default DaemonSets' bindings are still rendered")
	}
	if b, _ := json.Marshal(dp["ValidatingAdmissionPolicy /nodewise-surge-bridge-labelled"].Object); !bytes.Contains(b, []byte(`in [\"ztunnel-a\",\"ztunnel-b\"]`)) ||
		!bytes.Contains(b, []byte(`in [\"cni\",\"ztunnel-a\",\"ztunnel-b\"]`)) {
		t.Errorf("dataPlane values: nodewise-surge-bridge-labelled does not name them: %s", b)
	}
	if _, err := Template(context.Background(), "agent.mesh=on"); err == nil {
		t.Error("agent.mesh=on rendered; the schema allows auto or off")
	}
	role := objs["ClusterRole /nodewise-orchestrator"]
	if b, _ := json.Marshal(role.Object); bytes.Contains(b, []byte("certificatesigningrequests")) {
		t.Error("judge.enabled=false still grants the orchestrator CSR rights")
	}
	for _, k := range []string{"PodMonitor " + Namespace + "/nodewise-agent", "ServiceMonitor " + Namespace + "/nodewise-orchestrator", "ServiceMonitor " + Namespace + "/nodewise-revisions"} {
		if objs[k] == nil {
			t.Errorf("%s not rendered", k)
		}
	}
	withHook := render(t, "notify.webhookSecret=nodewise-notify", "notify.clusterName=prod-eu", "notify.dashboardURL=https://nodewise.example/")
	dep := withHook["Deployment "+Namespace+"/nodewise-orchestrator"]
	if b, _ := json.Marshal(dep.Object); !bytes.Contains(b, []byte(`"secretKeyRef":{"key":"url","name":"nodewise-notify"}`)) {
		t.Error("notify.webhookSecret does not give the orchestrator the webhook from the Secret")
	} else if !bytes.Contains(b, []byte(`--notify-cluster=prod-eu`)) {
		t.Error("notify.clusterName does not reach the orchestrator's --notify-cluster")
	} else if !bytes.Contains(b, []byte(`--notify-dashboard-url=https://nodewise.example/`)) {
		t.Error("notify.dashboardURL does not reach the orchestrator's --notify-dashboard-url")
	}
	if _, err := Template(context.Background(), "notify.webhookSecret=nodewise-notify", "notify.clusterName=prod-eu", "notify.dashboardURL=nodewise.example"); err == nil {
		t.Error("notify.dashboardURL without a scheme rendered; the schema wants http(s)://")
	}
	// The alerts' cluster name serves the webhook too; with neither, the
	// chart refuses (every message names its cluster).
	if b, _ := json.Marshal(render(t, "notify.webhookSecret=nodewise-notify", "monitoring.prometheusRule.cluster=prod-us")["Deployment "+Namespace+"/nodewise-orchestrator"].Object); !bytes.Contains(b, []byte(`--notify-cluster=prod-us`)) {
		t.Error("monitoring.prometheusRule.cluster is not the webhook's default cluster name")
	}
	if _, err := Template(context.Background(), "notify.webhookSecret=nodewise-notify"); err == nil || !strings.Contains(err.Error(), "needs notify.clusterName") {
		t.Errorf("a webhook without a cluster name: %v, want the chart to refuse it", err)
	}
	gates := render(t, "gates.addressAllow={prom.example.com,*.metrics.example.net}", "gates.clusterDomain=corp.local")
	for _, name := range []string{"nodewise-orchestrator", "nodewise-revisions"} {
		containers, _, _ := unstructured.NestedSlice(gates["Deployment "+Namespace+"/"+name].Object, "spec", "template", "spec", "containers")
		args := fmt.Sprint(containers[0].(map[string]any)["args"])
		for _, want := range []string{"--gate-address-allow=prom.example.com", "--gate-address-allow=*.metrics.example.net", "--cluster-domain=corp.local"} {
			if !strings.Contains(args, want) {
				t.Errorf("gates values: %s args %s, want %s", name, args, want)
			}
		}
	}
	// The orchestrator deletes pods and reads Deployments only in the targets'
	// namespace, and its flag says which one that is.
	mesh := render(t, "istioNamespace=mesh")
	for _, k := range []string{"Role mesh/nodewise-orchestrator-dataplane", "RoleBinding mesh/nodewise-orchestrator-dataplane"} {
		if mesh[k] == nil {
			t.Errorf("istioNamespace=mesh: %s not rendered", k)
		}
	}
	if b, _ := json.Marshal(mesh["Role mesh/nodewise-orchestrator-dataplane"]); !bytes.Contains(b, []byte(`"verbs":["delete"]`)) {
		t.Errorf("the dataplane Role does not grant pod delete: %s", b)
	}
	if b, _ := json.Marshal(mesh["ClusterRole /nodewise-orchestrator"].Object); bytes.Contains(b, []byte(`"delete"`)) || bytes.Contains(b, []byte(`"deployments"`)) {
		t.Errorf("the orchestrator's ClusterRole still grants delete or Deployments cluster-wide: %s", b)
	}
	containers, _, _ = unstructured.NestedSlice(mesh["Deployment "+Namespace+"/nodewise-orchestrator"].Object, "spec", "template", "spec", "containers")
	if args := fmt.Sprint(containers[0].(map[string]any)["args"]); !strings.Contains(args, "--istio-namespace=mesh") {
		t.Errorf("istioNamespace=mesh: orchestrator args %s", args)
	}
	def := render(t)
	dep = def["Deployment "+Namespace+"/nodewise-orchestrator"]
	containers, _, _ = unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	if img := containers[0].(map[string]any)["image"]; img != "ghcr.io/nodewise/orchestrator:v0.2.0" {
		t.Errorf("orchestrator image %v, want the chart's appVersion v0.2.0", img)
	}
	if def["Namespace /"+Namespace] != nil {
		t.Error("the chart renders the Namespace by default; helm install --create-namespace makes it")
	}
	if def["PodMonitor "+Namespace+"/nodewise-agent"] != nil {
		t.Error("a PodMonitor by default: it needs the Prometheus Operator's CRDs")
	}
}

// TestChartServerSideApply applies what `helm template` renders to the
// simulated cluster's real API server: every object must be accepted, and the
// controllers it installs must run (the DaemonSet puts an agent on every node;
// the PodDisruptionBudget counts the orchestrator's replicas).
func TestChartServerSideApply(t *testing.T) {
	c := cluster.Start(t, cluster.Options{Nodes: 3})
	ctx := context.Background()
	objs, err := Template(ctx, "createNamespace=true")
	if err != nil {
		t.Fatal(err)
	}
	if err := EnsureNamespace(ctx, c.Client, cluster.IstioNamespace); err != nil {
		t.Fatal(err)
	}
	if err := Apply(ctx, c.Config, objs); err != nil {
		t.Fatal(err)
	}
	// Re-applying is a no-op, not a conflict (upgrade path of `helm upgrade` and `kubectl apply`).
	if err := Apply(ctx, c.Config, objs); err != nil {
		t.Fatalf("second apply: %v", err)
	}
	testkit.WaitFor(t, 2*time.Minute, "an agent pod on each of the 3 nodes", func() (bool, error) {
		ds, err := c.Client.AppsV1().DaemonSets(AgentNamespace).Get(ctx, "nodewise-agent", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return ds.Status.DesiredNumberScheduled == 3 && ds.Status.NumberReady == 3, fmt.Errorf("DaemonSet status %+v", ds.Status)
	})
	testkit.WaitFor(t, 2*time.Minute, "the orchestrator's PodDisruptionBudget to allow one disruption of two replicas", func() (bool, error) {
		pdb, err := c.Client.PolicyV1().PodDisruptionBudgets(Namespace).Get(ctx, "nodewise-orchestrator", metav1.GetOptions{})
		return err == nil && pdb.Status.ExpectedPods == 2 && pdb.Status.CurrentHealthy == 2 && pdb.Status.DisruptionsAllowed == 1, err
	})
	checkCredentialRBAC(t, c)
}

// checkCredentialRBAC asks the API server what the chart lets the agent and
// the orchestrator do with credentials: each only its own part.
func checkCredentialRBAC(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	orch := "system:serviceaccount:" + Namespace + ":nodewise-orchestrator"
	agent := "system:serviceaccount:" + AgentNamespace + ":nodewise-agent"
	for _, tc := range []struct {
		user, group, resource, sub, name, verb, ns string
		want                                       bool
	}{
		{orch, "", "secrets", "", "nodewise-agent-ca", "get", Namespace, true},
		{orch, "", "secrets", "", "nodewise-agent-ca", "update", Namespace, true},
		{orch, "", "secrets", "", "other", "get", Namespace, false},
		{orch, "", "secrets", "", "", "list", Namespace, false},
		{orch, "", "secrets", "", "nodewise-agent-ca", "get", "kube-system", false},
		{orch, "certificates.k8s.io", "signers", "", "nodewise.io/agent-serving", "sign", "", true},
		{orch, "certificates.k8s.io", "signers", "", "nodewise.io/agent-serving", "approve", "", true},
		{orch, "certificates.k8s.io", "signers", "", "kubernetes.io/kubelet-serving", "sign", "", false},
		{orch, "certificates.k8s.io", "signers", "", "kubernetes.io/kube-apiserver-client", "approve", "", false},
		{orch, "certificates.k8s.io", "certificatesigningrequests", "approval", "", "update", "", true},
		{orch, "certificates.k8s.io", "certificatesigningrequests", "", "", "delete", "", false},
		{agent, "certificates.k8s.io", "certificatesigningrequests", "", "", "create", "", true},
		{agent, "certificates.k8s.io", "certificatesigningrequests", "", "", "watch", "", true}, // client-go's certificate manager waits on a watch
		{agent, "certificates.k8s.io", "certificatesigningrequests", "", "", "delete", "", false},
		{agent, "certificates.k8s.io", "certificatesigningrequests", "approval", "", "update", "", false},
		{agent, "certificates.k8s.io", "certificatesigningrequests", "status", "", "update", "", false},
		{agent, "certificates.k8s.io", "signers", "", "nodewise.io/agent-serving", "sign", "", false},
		{agent, "authentication.k8s.io", "tokenreviews", "", "", "create", "", true},
		{agent, "", "secrets", "", "nodewise-agent-ca", "get", Namespace, false},
		{agent, "", "pods", "", "", "list", "", true},
		{agent, "", "pods", "", "", "watch", "", true}, // the enrollment check's informers (docs/enrollment.md)
		{agent, "", "namespaces", "", "", "watch", "", true},
		{agent, "", "namespaces", "", "", "update", "", false},
		{agent, "", "pods", "", "", "get", "", false},
		{agent, "", "pods", "", "", "delete", "", false},
	} {
		sar := &authv1.SubjectAccessReview{Spec: authv1.SubjectAccessReviewSpec{User: tc.user, Groups: []string{"system:serviceaccounts"},
			ResourceAttributes: &authv1.ResourceAttributes{Group: tc.group, Resource: tc.resource, Subresource: tc.sub, Name: tc.name, Verb: tc.verb, Namespace: tc.ns}}}
		got, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != tc.want {
			t.Errorf("%s: %s %s/%s %q in %q: allowed %v, want %v", tc.user, tc.verb, tc.resource, tc.sub, tc.name, tc.ns, got.Status.Allowed, tc.want)
		}
	}
	// The agent reads the ServiceAccount issuer's keys (agentpki) by the
	// chart's own grant, asked without the system:serviceaccounts group, so
	// without the default system:service-account-issuer-discovery binding a
	// cluster may remove; nothing else of the issuer's discovery.
	for path, want := range map[string]bool{"/openid/v1/jwks": true, "/.well-known/openid-configuration": false} {
		sar := &authv1.SubjectAccessReview{Spec: authv1.SubjectAccessReviewSpec{User: agent, NonResourceAttributes: &authv1.NonResourceAttributes{Path: path, Verb: "get"}}}
		got, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Allowed != want {
			t.Errorf("%s without the default bindings: get %s: allowed %v, want %v", agent, path, got.Status.Allowed, want)
		}
	}
}

// TestAlertmanagerValues: alertmanager.url turns on the orchestrator's
// silences with the chart's extend period, the matchers reach it verbatim
// (their {{.Node}} is the orchestrator's template, not Helm's), and
// tokenSecret mounts the Secret's token where --alertmanager-token-file reads.
func TestAlertmanagerValues(t *testing.T) {
	args := func(objs map[string]*unstructured.Unstructured) string {
		b, _ := json.Marshal(objs["Deployment "+Namespace+"/nodewise-orchestrator"].Object)
		return string(b)
	}
	if got := args(render(t)); strings.Contains(got, "--alertmanager") || strings.Contains(got, "alertmanager-token") {
		t.Errorf("default values: the orchestrator has Alertmanager flags or volumes: %s", got)
	}
	on := args(render(t, "alertmanager.url=http://am.monitoring:9093", "alertmanager.tokenSecret=am-token", `alertmanager.matchers[0]=node="{{.Node}}"`))
	for _, want := range []string{
		`--alertmanager-url=http://am.monitoring:9093`, `--alertmanager-silence-extend=1m`,
		`--alertmanager-matcher=node=\"{{.Node}}\"`, `--alertmanager-token-file=/var/run/secrets/nodewise.io/alertmanager/token`,
		`"mountPath":"/var/run/secrets/nodewise.io/alertmanager"`, `"secretName":"am-token"`,
	} {
		if !strings.Contains(on, want) {
			t.Errorf("alertmanager values: the orchestrator lacks %s", want)
		}
	}
	if _, err := Template(context.Background(), "alertmanager.url=am:9093"); err == nil {
		t.Error("alertmanager.url without a scheme rendered; the schema wants http(s)://")
	}
}
