package precheck

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/istio/inventory"
)

// CheckLifetimes names the finding of sidecar workloads whose connections
// outlive their proxies' drain with no maximum connection duration.
const CheckLifetimes = "connection-lifetime"

// PodConnections is one pod's open connections by age, as a node agent
// reports them (health/wire's ConnAges): Ages[i] counts the ages below
// Bounds[i] and at or above the bound before; the last entry counts the
// older ones, so Ages has one entry more than Bounds.
type PodConnections struct {
	Namespace, Name string
	Bounds          []float64 // seconds
	Ages            []uint64
}

// sidecarDrain is Istio's default terminationDrainDuration: how long a
// terminating sidecar keeps its connections before Envoy exits.
const sidecarDrain = 5 * time.Second

// lifetimes: a sidecar workload whose connections (the node agents' age
// buckets) live past its proxy's termination drain loses them all when the
// sidecar restarts, at once, unless a maximum connection duration already
// recycles them one by one. A DestinationRule that sets
// connectionPool.tcp or .http maxConnectionDuration covers the namespaces
// its host names (every namespace for a wildcard host, or for one in the
// root namespace). A warning per namespace: a limit rolled out weeks
// before the upgrade makes the restart reset nothing that would not have
// been closed anyway.
func lifetimes(in Input) []Finding {
	if len(in.Connections) == 0 {
		return nil
	}
	pods := map[string]*corev1.Pod{}
	for i := range in.Pods {
		p := &in.Pods[i]
		pods[p.Namespace+"/"+p.Name] = p
	}
	covered, all := limited(in.DestinationRules, in.RootNamespace)
	if all {
		return nil
	}
	type tally struct {
		pods      map[string]bool
		conns     uint64
		drain     time.Duration
		oldestAge float64 // lower bound of the oldest bucket with a connection
	}
	byNS := map[string]*tally{}
	for _, pc := range in.Connections {
		p := pods[pc.Namespace+"/"+pc.Name]
		if p == nil || covered[p.Namespace] || !inventory.HasSidecar(p) {
			continue
		}
		drain := termDrain(p, in.MeshConfigs)
		n, oldest := olderThan(pc, drain)
		if n == 0 {
			continue
		}
		t := byNS[p.Namespace]
		if t == nil {
			t = &tally{pods: map[string]bool{}}
			byNS[p.Namespace] = t
		}
		t.pods[p.Name] = true
		t.conns += n
		t.drain = max(t.drain, drain)
		t.oldestAge = max(t.oldestAge, oldest)
	}
	var out []Finding
	for ns, t := range byNS {
		out = append(out, Finding{Check: CheckLifetimes, Severity: Warning, Subject: "namespace " + ns,
			Message: fmt.Sprintf("%d connection%s on %d sidecar pod%s outlive%s the proxies' %s drain (the oldest over %s) and no DestinationRule sets a maximum connection duration: a sidecar restart resets them together; roll a limit (trafficPolicy.connectionPool.tcp/http.maxConnectionDuration) out weeks before",
				t.conns, plural(int(t.conns)), len(t.pods), plural(len(t.pods)), map[bool]string{true: "s", false: ""}[t.conns == 1], t.drain, time.Duration(t.oldestAge)*time.Second)})
	}
	return out
}

// olderThan counts pc's connections certainly older than d, those in the
// buckets that start at or after it, and the start of the oldest such
// bucket with any, in seconds. Ages of the wrong length count none.
func olderThan(pc PodConnections, d time.Duration) (n uint64, oldest float64) {
	if len(pc.Ages) != len(pc.Bounds)+1 {
		return 0, 0
	}
	for i, c := range pc.Ages {
		lower := 0.0
		if i > 0 {
			lower = pc.Bounds[i-1]
		}
		if c > 0 && lower >= d.Seconds() {
			n += c
			oldest = lower
		}
	}
	return n, oldest
}

// termDrain is a sidecar's terminationDrainDuration: its own
// proxy.istio.io/config, else its revision's mesh config's defaultConfig
// (istio-<rev>, then istio), else Istio's default.
func termDrain(p *corev1.Pod, meshes map[string]*corev1.ConfigMap) time.Duration {
	var pc struct {
		TerminationDrainDuration string `json:"terminationDrainDuration"`
	}
	if raw := p.Annotations["proxy.istio.io/config"]; raw != "" && yaml.Unmarshal([]byte(raw), &pc) == nil {
		if d, err := time.ParseDuration(pc.TerminationDrainDuration); err == nil {
			return d
		}
	}
	for _, name := range []string{"istio-" + p.Labels[istio.LabelRev], "istio"} {
		cm := meshes[name]
		if cm == nil {
			continue
		}
		var mesh struct {
			DefaultConfig struct {
				TerminationDrainDuration string `json:"terminationDrainDuration"`
			} `json:"defaultConfig"`
		}
		if yaml.Unmarshal([]byte(cm.Data["mesh"]), &mesh) == nil {
			if d, err := time.ParseDuration(mesh.DefaultConfig.TerminationDrainDuration); err == nil {
				return d
			}
		}
	}
	return sidecarDrain
}

// limited reads the DestinationRules that set a maximum connection duration:
// the namespaces whose services their hosts name, or all (a wildcard host,
// or a rule in the root namespace, which applies mesh-wide).
func limited(drs []unstructured.Unstructured, root string) (map[string]bool, bool) {
	if root == "" {
		root = "istio-system"
	}
	covered := map[string]bool{}
	for i := range drs {
		dr := &drs[i]
		if !setsMaxDuration(dr.Object["spec"]) {
			continue
		}
		host, _, _ := unstructured.NestedString(dr.Object, "spec", "host")
		labels := strings.Split(host, ".")
		switch {
		case dr.GetNamespace() == root || host == "*" || (labels[0] == "*" && len(labels) > 1 && (len(labels) < 3 || labels[2] != "svc")):
			return nil, true
		case len(labels) == 1:
			covered[dr.GetNamespace()] = true // a short name: a service in the rule's namespace
		default:
			covered[labels[1]] = true // name.namespace[.svc.cluster.local]
		}
	}
	return covered, false
}

// setsMaxDuration says whether a DestinationRule spec (or one of its
// subsets' or ports' traffic policies) sets connectionPool.tcp or .http
// maxConnectionDuration.
func setsMaxDuration(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		if cp, ok := v["connectionPool"].(map[string]any); ok {
			for _, proto := range []string{"tcp", "http"} {
				if m, ok := cp[proto].(map[string]any); ok && m["maxConnectionDuration"] != nil && m["maxConnectionDuration"] != "" && m["maxConnectionDuration"] != "0s" {
					return true
				}
			}
		}
		for _, e := range v {
			if setsMaxDuration(e) {
				return true
			}
		}
	case []any:
		for _, e := range v {
			if setsMaxDuration(e) {
				return true
			}
		}
	}
	return false
}
