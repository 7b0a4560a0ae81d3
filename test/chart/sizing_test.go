package chart

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/nodewise/nodewise/test/testkit"
)

// orchestratorModelMiB is docs/orchestrator.md's measured memory model,
// RSS ≈ 73 MiB + 0.17 MiB a node (10 app pods a node).
func orchestratorModelMiB(nodes int) float64 { return 73 + 0.17*float64(nodes) }

// podSpecs returns every pod spec the objects render, by object key: the
// Deployments' and DaemonSets' templates and the bare Pods (the helm test).
func podSpecs(t *testing.T, objs map[string]*unstructured.Unstructured) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for k, o := range objs {
		var path []string
		switch o.GetKind() {
		case "Deployment", "DaemonSet", "StatefulSet", "Job", "ReplicaSet":
			path = []string{"spec", "template", "spec"}
		case "Pod":
			path = []string{"spec"}
		case "CronJob":
			path = []string{"spec", "jobTemplate", "spec", "template", "spec"}
		default:
			continue
		}
		spec, ok, _ := unstructured.NestedMap(o.Object, path...)
		if !ok {
			t.Fatalf("%s has no pod spec", k)
		}
		out[k] = spec
	}
	return out
}

// container returns the first container of the pod spec of objs[key].
func container(t *testing.T, objs map[string]*unstructured.Unstructured, key string) map[string]any {
	t.Helper()
	spec, ok := podSpecs(t, map[string]*unstructured.Unstructured{key: objs[key]})[key]
	if !ok || objs[key] == nil {
		t.Fatalf("%s not rendered", key)
	}
	cs, _ := spec["containers"].([]any)
	if len(cs) == 0 {
		t.Fatalf("%s has no containers", key)
	}
	return cs[0].(map[string]any)
}

func quantity(t *testing.T, c map[string]any, path ...string) *resource.Quantity {
	t.Helper()
	v, ok, _ := unstructured.NestedFieldNoCopy(c, path...)
	if !ok {
		return nil
	}
	q, err := resource.ParseQuantity(fmt.Sprint(v))
	if err != nil {
		t.Fatalf("%s %s: %v", c["name"], strings.Join(path, "."), err)
	}
	return &q
}

const (
	orchestratorKey = "Deployment " + Namespace + "/nodewise-orchestrator"
	revisionsKey    = "Deployment " + Namespace + "/nodewise-revisions"
	agentKey        = "DaemonSet " + AgentNamespace + "/nodewise-agent"
	probeKey        = "DaemonSet nodewise-probe/nodewise-probe"
	helmTestKey     = "Pod " + Namespace + "/nodewise-test-agents"
)

// TestChartSizedForClusterSize renders the defaults and each clusterSize:
// every pod the chart renders (the helm test and the probe included) has a
// priority class, and every container CPU and memory requests and a memory
// limit no lower than its request; the orchestrator's memory limit is at
// least the measured model's figure at the size's largest fleet (the
// default is sized for 2,000 nodes). An unknown size is refused.
func TestChartSizedForClusterSize(t *testing.T) {
	for _, tc := range []struct {
		set   []string
		nodes int
	}{
		{nil, 2000},
		{[]string{"clusterSize=small"}, 300},
		{[]string{"clusterSize=medium"}, 1000},
		{[]string{"clusterSize=large"}, 2000},
	} {
		objs := render(t, tc.set...)
		specs := podSpecs(t, objs)
		for _, k := range []string{orchestratorKey, revisionsKey, agentKey, probeKey, helmTestKey} {
			if specs[k] == nil {
				t.Fatalf("%v: %s not rendered", tc.set, k)
			}
		}
		for k, spec := range specs {
			if pc, _ := spec["priorityClassName"].(string); pc == "" {
				t.Errorf("%v: %s has no priorityClassName", tc.set, k)
			}
			var cs []any
			for _, field := range []string{"initContainers", "containers"} {
				more, _ := spec[field].([]any)
				cs = append(cs, more...)
			}
			for _, c := range cs {
				c := c.(map[string]any)
				cpu, mem := quantity(t, c, "resources", "requests", "cpu"), quantity(t, c, "resources", "requests", "memory")
				limit := quantity(t, c, "resources", "limits", "memory")
				if cpu == nil || mem == nil || limit == nil {
					t.Errorf("%v: %s container %s resources %v, want CPU and memory requests and a memory limit", tc.set, k, c["name"], c["resources"])
					continue
				}
				if limit.Cmp(*mem) < 0 {
					t.Errorf("%v: %s container %s: memory limit %s below its request %s", tc.set, k, c["name"], limit, mem)
				}
			}
		}
		orch := container(t, objs, orchestratorKey)
		limit := quantity(t, orch, "resources", "limits", "memory")
		want := orchestratorModelMiB(tc.nodes)
		if got := float64(limit.Value()) / (1 << 20); got < want {
			t.Errorf("%v: the orchestrator's memory limit %s is below the model's %.0f MiB at %d nodes: OOM-killed mid-rollout", tc.set, limit, want, tc.nodes)
		}
	}
	if _, err := Template(context.Background(), "clusterSize=huge"); err == nil {
		t.Error("clusterSize=huge rendered; want it refused (small, medium or large)")
	}
}

// TestChartResourceOverridesWin: a component's own resources win over its
// clusterSize's, key by key; the keys it does not set keep the preset's.
func TestChartResourceOverridesWin(t *testing.T) {
	small := render(t, "clusterSize=small")
	objs := render(t, "clusterSize=small", "orchestrator.resources.limits.memory=3Gi",
		"probe.resources.requests.cpu=1m", "helmTest.resources.limits.memory=99Mi", "agent.resources.limits.cpu=2")
	for _, tc := range []struct {
		key  string
		path []string
		want string
	}{
		{orchestratorKey, []string{"limits", "memory"}, "3Gi"},
		{probeKey, []string{"requests", "cpu"}, "1m"},
		{helmTestKey, []string{"limits", "memory"}, "99Mi"},
		{agentKey, []string{"limits", "cpu"}, "2"},
	} {
		c := container(t, objs, tc.key)
		if got := quantity(t, c, append([]string{"resources"}, tc.path...)...); got == nil || got.String() != tc.want {
			t.Errorf("%s resources.%s = %v, want the override %s", tc.key, strings.Join(tc.path, "."), got, tc.want)
		}
		// Every other key is the preset's.
		preset := container(t, small, tc.key)["resources"].(map[string]any)
		got := c["resources"].(map[string]any)
		for _, part := range []string{"requests", "limits"} {
			p, _ := preset[part].(map[string]any)
			g, _ := got[part].(map[string]any)
			for name, v := range p {
				if part == tc.path[0] && name == tc.path[1] {
					continue
				}
				if fmt.Sprint(g[name]) != fmt.Sprint(v) {
					t.Errorf("%s resources.%s.%s = %v, want clusterSize=small's %v", tc.key, part, name, g[name], v)
				}
			}
		}
	}
}

// TestChartComponentValuesReachArgs: the probe's rate and streams, the
// agent's CNI directories and histograms, and every component's extraArgs
// reach the rendered containers.
func TestChartComponentValuesReachArgs(t *testing.T) {
	args := func(objs map[string]*unstructured.Unstructured, key string) []string {
		raw, _ := container(t, objs, key)["args"].([]any)
		var out []string
		for _, a := range raw {
			out = append(out, fmt.Sprint(a))
		}
		return out
	}
	has := func(list []string, want string) bool {
		for _, a := range list {
			if a == want {
				return true
			}
		}
		return false
	}
	def := render(t)
	for _, want := range []string{"--rate=20", "--streams=4"} {
		if !has(args(def, probeKey), want) {
			t.Errorf("probe args %v lack the default %s", args(def, probeKey), want)
		}
	}
	for _, a := range args(def, agentKey) {
		if strings.HasPrefix(a, "--pod-histograms") {
			t.Errorf("agent args %v: histograms are on by default, no flag wanted", args(def, agentKey))
		}
	}
	objs := render(t, "probe.rate=7", "probe.streams=2", "agent.podHistograms=false",
		"agent.cni.binDir=/home/kubernetes/bin", "agent.cni.confDir=/etc/cni/custom.d",
		"orchestrator.extraArgs={--resync=5s}", "revisions.extraArgs={--resync=6s}",
		"agent.extraArgs={--history-keep=2h}", "probe.extraArgs={--stream-every=9s}")
	for key, wants := range map[string][]string{
		probeKey:        {"--rate=7", "--streams=2", "--stream-every=9s"},
		agentKey:        {"--pod-histograms=false", "--history-keep=2h", "--cni-bin-dir=/host/home/kubernetes/bin", "--cni-conf-dir=/host/etc/cni/custom.d"},
		orchestratorKey: {"--resync=5s"},
		revisionsKey:    {"--resync=6s"},
	} {
		for _, want := range wants {
			if !has(args(objs, key), want) {
				t.Errorf("%s args %v lack %s", key, args(objs, key), want)
			}
		}
	}
	// The host's CNI directories are mounted where the agent's flags look.
	spec := podSpecs(t, objs)[agentKey]
	hostPaths := map[string]string{}
	for _, v := range spec["volumes"].([]any) {
		if p, ok, _ := unstructured.NestedString(v.(map[string]any), "hostPath", "path"); ok {
			hostPaths[v.(map[string]any)["name"].(string)] = p
		}
	}
	mounts := map[string]string{}
	for _, m := range container(t, objs, agentKey)["volumeMounts"].([]any) {
		mounts[m.(map[string]any)["name"].(string)] = m.(map[string]any)["mountPath"].(string)
	}
	for vol, want := range map[string]string{"cni-bin": "/home/kubernetes/bin", "cni-conf": "/etc/cni/custom.d"} {
		if hostPaths[vol] != want || mounts[vol] != "/host"+want {
			t.Errorf("volume %s: host path %q mounted at %q, want %s at /host%s", vol, hostPaths[vol], mounts[vol], want, want)
		}
	}
	if _, err := Template(context.Background(), "probe.rate=0"); err == nil {
		t.Error("probe.rate=0 rendered; the probe refuses a rate outside (0, 1000]")
	}
}

// TestSizingDocMatchesTheChart: docs/sizing.md's table row for each
// clusterSize shows what the chart renders, component by component.
func TestSizingDocMatchesTheChart(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(testkit.RepoRoot(), "docs", "sizing.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(doc), "\n") {
		if size, _, ok := strings.Cut(strings.TrimPrefix(line, "| `"), "`"); ok && strings.HasPrefix(line, "| `") {
			rows[size] = line
		}
	}
	for _, size := range []string{"small", "medium", "large"} {
		objs := render(t, "clusterSize="+size)
		var cells []string
		for _, key := range []string{orchestratorKey, revisionsKey, agentKey, probeKey, helmTestKey} {
			c := container(t, objs, key)
			cells = append(cells, fmt.Sprintf("%s, %s / %s", quantity(t, c, "resources", "requests", "cpu"),
				quantity(t, c, "resources", "requests", "memory"), quantity(t, c, "resources", "limits", "memory")))
		}
		want := " | " + strings.Join(cells, " | ") + " |"
		if row := rows[size]; !strings.HasSuffix(row, want) {
			t.Errorf("docs/sizing.md's row for %s:\n%s\nwant it to end with the chart's\n%s", size, row, want)
		}
	}
}
