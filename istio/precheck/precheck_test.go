package precheck

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/istio/skew"
)

// healthy is a cluster with nothing to find: revision 1-28 and 1-29, tags
// on both, namespaces on a tag and on a revision, ztunnel at 1.29.
func healthy() Input {
	return Input{
		Inventory: inventory.Inventory{
			Revisions:  []inventory.Revision{{Name: "1-28", Version: "1.28.1", Ready: true}, {Name: "1-29", Version: "1.29.0", Ready: true}},
			Tags:       map[string]string{"default": "1-28", "canary": "1-29"},
			Nodes:      []inventory.Node{{Name: "n1", Ztunnel: "1.29.0"}, {Name: "n2", Ztunnel: "1.29.0"}},
			Namespaces: []inventory.Namespace{{Name: "a", Rev: "default"}, {Name: "b", Rev: "1-29"}, {Name: "c", Rev: "anything", Injection: "enabled"}},
		},
		AuthorizationPolicies: []unstructured.Unstructured{policy("a", "deny-all", true)},
		MeshConfigs:           map[string]*corev1.ConfigMap{"istio": mesh("45s", "60s")},
	}
}

func policy(ns, name string, dryRun bool) unstructured.Unstructured {
	var u unstructured.Unstructured
	u.SetAPIVersion("security.istio.io/v1")
	u.SetKind("AuthorizationPolicy")
	u.SetNamespace(ns)
	u.SetName(name)
	if dryRun {
		u.SetAnnotations(map[string]string{"istio.io/dry-run": "true"})
	}
	return u
}

func mesh(drain, parent string) *corev1.ConfigMap {
	return &corev1.ConfigMap{Data: map[string]string{"mesh": fmt.Sprintf("defaultConfig:\n  drainDuration: %s\n  parentShutdownDuration: %s\n", drain, parent)}}
}

func TestNothingFoundOnAHealthyCluster(t *testing.T) {
	if fs := Check(healthy()); len(fs) != 0 {
		t.Fatalf("findings on a healthy cluster: %v", fs)
	}
}

// TestEachHazardFound constructs each hazard alone and checks it is the one
// finding, with its severity and the words a person acts on.
func TestEachHazardFound(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mut      func(*Input)
		check    string
		severity Severity
		says     string
	}{
		{"a tag on a revision no istiod serves", func(in *Input) { in.Inventory.Tags["prod"] = "1-27" },
			CheckTags, Error, "tag prod: points at revision 1-27, which no istiod serves"},
		{"a namespace on no tag and no revision", func(in *Input) {
			in.Inventory.Namespaces = append(in.Inventory.Namespaces, inventory.Namespace{Name: "shop", Rev: "stable"})
		}, CheckNamespaceRev, Error, "namespace shop: istio.io/rev=stable names no tag and no installed revision"},
		{"a dry-run policy with old ztunnels", func(in *Input) { in.Inventory.Nodes[1].Ztunnel = "1.28.1" },
			CheckDryRun, Error, "AuthorizationPolicy a/deny-all: is dry-run (istio.io/dry-run=true), but ztunnel older than 1.29 enforces it on 1 node (n2)"},
		{"workload discovery near the limit", func(in *Input) { in.Pods = pods(32000, "") },
			CheckDiscoverySize, Warning, "32000 workloads make a workload-discovery response of about 3.2 MiB against gRPC's 4 MiB limit"},
		{"workload discovery past the limit", func(in *Input) { in.Pods = pods(41000, "") },
			CheckDiscoverySize, Error, "41000 workloads"},
		{"mesh drain at Envoy's defaults", func(in *Input) { in.MeshConfigs["istio-1-29"] = mesh("600s", "900s") },
			CheckDrain, Warning, "mesh config istio-1-29: sidecar drain at Envoy's edge defaults"},
		{"pods' own drain at Envoy's defaults", func(in *Input) {
			in.Pods = pods(3, "drainDuration: 10m\nparentShutdownDuration: 15m\n")
		}, CheckDrain, Warning, "namespace shop: 3 pods' sidecar drain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := healthy()
			tc.mut(&in)
			fs := Check(in)
			if len(fs) != 1 || fs[0].Check != tc.check || fs[0].Severity != tc.severity || !strings.Contains(fs[0].String(), tc.says) {
				t.Fatalf("findings %v, want one %s %s saying %q", fs, tc.severity, tc.check, tc.says)
			}
		})
	}
}

// A dry-run policy is no hazard before any 1.29 istiod (none sends it to
// ztunnel), unless the upgrade is going there.
func TestDryRunOnlyWithA129Istiod(t *testing.T) {
	in := healthy()
	in.Inventory.Revisions = in.Inventory.Revisions[:1]
	in.Inventory.Tags = map[string]string{"default": "1-28"}
	in.Inventory.Namespaces = in.Inventory.Namespaces[:1]
	for i := range in.Inventory.Nodes {
		in.Inventory.Nodes[i].Ztunnel = "1.28.1"
	}
	if fs := Check(in); len(fs) != 0 {
		t.Fatalf("1.28 only: %v", fs)
	}
	in.To = skew.MustParse("1.29.0")
	if fs := Check(in); len(fs) != 1 || fs[0].Check != CheckDryRun || !strings.Contains(fs[0].Message, "2 nodes (n1, n2)") {
		t.Fatalf("going to 1.29: %v", fs)
	}
}

func pods(n int, proxyConfig string) []corev1.Pod {
	out := make([]corev1.Pod, n)
	for i := range out {
		out[i] = corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: fmt.Sprint("p", i)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}, {Name: istio.ProxyContainer, Image: "proxyv2:1.28.1"}}}}
		if proxyConfig != "" {
			out[i].Annotations = map[string]string{"proxy.istio.io/config": proxyConfig}
		}
	}
	return out
}
