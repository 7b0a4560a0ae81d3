package precheck

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// bounds are the agents' age bucket bounds (health/wire).
var bounds = []float64{1, 2, 5, 9, 10, 15, 20, 25, 30, 45, 60, 120, 300, 600, 1800, 3600}

const ztunnel129 = "istio/ztunnel:1.29.0"

// pullFailed is a pre-pull pod on node whose one container could not pull image.
func pullFailed(node, image string) corev1.Pod {
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "istio-system", Name: "nodewise-prepull-r-" + node + "-ztunnel"},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "pull-0", Image: image}}},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "pull-0", Image: image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image"}}}}},
	}
}

func pullOn(nodes ...string) Pull {
	return Pull{For: "NodeRollout r, istio-system/ztunnel", Images: []string{ztunnel129}, Nodes: nodes}
}

// TestImagesOneFindingPerNodeThatCannotPull: a node whose pod failed to
// pull a new image is an error naming the node, the image, what needs it
// and why; a node that lists the image has it, whatever an older pod says;
// a node that never tried is not judged; many nodes share one line.
func TestImagesOneFindingPerNodeThatCannotPull(t *testing.T) {
	in := healthy()
	in.Pulls = []Pull{pullOn("n1", "n2", "n3")}
	in.Pods = []corev1.Pod{pullFailed("n2", "docker.io/"+ztunnel129), pullFailed("n3", ztunnel129)}
	in.Nodes = []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "n3"},
		Status: corev1.NodeStatus{Images: []corev1.ContainerImage{{Names: []string{"docker.io/istio/ztunnel@sha256:00", "docker.io/" + ztunnel129}}}}}}
	fs := Check(in)
	if len(fs) != 1 || fs[0].Check != CheckImages || fs[0].Severity != Error ||
		fs[0].String() != "Error image-pull: node n2: cannot pull istio/ztunnel:1.29.0, which NodeRollout r, istio-system/ztunnel needs: ImagePullBackOff: Back-off pulling image (pod istio-system/nodewise-prepull-r-n2-ztunnel); make it pullable there (registry, ImagePullSecrets, the tag) before the rollout starts" {
		t.Fatalf("findings %v, want n2's alone", fs)
	}

	in = healthy()
	var nodes []string
	for i := range 5 {
		n := fmt.Sprint("m", i)
		nodes = append(nodes, n)
		in.Pods = append(in.Pods, pullFailed(n, ztunnel129))
	}
	in.Pulls = []Pull{pullOn(nodes...)}
	fs = Check(in)
	if len(fs) != 1 || fs[0].Subject != "5 nodes" || !strings.Contains(fs[0].Message, "(m0, m1, m2 and 2 more): on m0 ImagePullBackOff") {
		t.Fatalf("findings %v, want one line for the 5 nodes", fs)
	}
}

// sidecar is a pod of namespace ns with an Istio sidecar.
func sidecar(ns, name string, annotations map[string]string) corev1.Pod {
	p := pods(1, "")[0]
	p.Namespace, p.Name, p.Annotations = ns, name, annotations
	return p
}

// aged is a pod's connections: n in the bucket that starts at lower seconds.
func aged(ns, name string, lower float64, n uint64) PodConnections {
	pc := PodConnections{Namespace: ns, Name: name, Bounds: bounds, Ages: make([]uint64, len(bounds)+1)}
	i := 0
	for i < len(bounds) && bounds[i] <= lower {
		i++
	}
	pc.Ages[i] = n
	return pc
}

func maxDuration(ns, host, where string) unstructured.Unstructured {
	u := unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"host": host}}}
	pool := map[string]any{"connectionPool": map[string]any{where: map[string]any{"maxConnectionDuration": "1h"}}}
	if where == "tcp" {
		u.Object["spec"].(map[string]any)["trafficPolicy"] = pool
	} else {
		u.Object["spec"].(map[string]any)["subsets"] = []any{map[string]any{"name": "v1", "trafficPolicy": pool}}
	}
	u.SetNamespace(ns)
	u.SetName("limit")
	return u
}

// TestConnectionLifetimes: sidecar pods whose connections outlive the
// proxies' termination drain are a warning per namespace, unless a
// DestinationRule sets a maximum connection duration for the namespace (or
// mesh-wide), or the pods' own drain outlasts their connections.
func TestConnectionLifetimes(t *testing.T) {
	base := func() Input {
		in := healthy()
		in.Pods = []corev1.Pod{sidecar("shop", "web-1", nil), sidecar("shop", "web-2", nil), sidecar("pay", "api-1", nil)}
		in.Connections = []PodConnections{aged("shop", "web-1", 3600, 3), aged("shop", "web-2", 600, 1), aged("pay", "api-1", 2, 7), aged("gone", "x", 3600, 9)}
		return in
	}
	fs := Check(base())
	if len(fs) != 1 || fs[0].Check != CheckLifetimes || fs[0].Severity != Warning ||
		fs[0].String() != "Warning connection-lifetime: namespace shop: 4 connections on 2 sidecar pods outlive the proxies' 5s drain (the oldest over 1h0m0s) and no DestinationRule sets a maximum connection duration: a sidecar restart resets them together; roll a limit (trafficPolicy.connectionPool.tcp/http.maxConnectionDuration) out weeks before" {
		t.Fatalf("findings %v, want shop's alone (pay's connections are younger than its drain)", fs)
	}
	for _, tc := range []struct {
		name string
		mut  func(*Input)
		want int
	}{
		{"a limit in the namespace", func(in *Input) { in.DestinationRules = append(in.DestinationRules, maxDuration("shop", "web", "tcp")) }, 0},
		{"a limit for the namespace's hosts from elsewhere", func(in *Input) {
			in.DestinationRules = append(in.DestinationRules, maxDuration("other", "*.shop.svc.cluster.local", "http"))
		}, 0},
		{"a mesh-wide limit", func(in *Input) {
			in.DestinationRules = append(in.DestinationRules, maxDuration("istio-system", "*.local", "tcp"))
		}, 0},
		{"a limit on another namespace", func(in *Input) { in.DestinationRules = append(in.DestinationRules, maxDuration("pay", "api", "tcp")) }, 1},
		{"a rule with no limit", func(in *Input) {
			in.DestinationRules = append(in.DestinationRules, unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"namespace": "shop"}, "spec": map[string]any{"host": "web"}}})
		}, 1},
		{"a drain longer than the connections", func(in *Input) {
			for i := range in.Pods {
				in.Pods[i].Annotations = map[string]string{"proxy.istio.io/config": "terminationDrainDuration: 2h\n"}
			}
		}, 0},
		{"a mesh drain shorter than one connection", func(in *Input) {
			in.MeshConfigs["istio"] = &corev1.ConfigMap{Data: map[string]string{"mesh": "defaultConfig:\n  terminationDrainDuration: 1s\n"}}
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := base()
			tc.mut(&in)
			if fs := Check(in); len(fs) != tc.want {
				t.Fatalf("findings %v, want %d", fs, tc.want)
			}
		})
	}
}
