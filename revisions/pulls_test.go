package revisions

import (
	"reflect"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/istio/precheck"
)

// TestPulls: a migration to 1-29 needs 1-29's proxy on the nodes of the
// namespaces it restarts (not the others'), or of the waypoints it moves,
// and 1-29's istiod image where its pods run. The proxy image is what
// 1-29's sidecars run, else istiod's image with proxyv2 for its name.
func TestPulls(t *testing.T) {
	istiodLabels := map[string]string{"app": "istiod", "istio.io/rev": "1-29"}
	istiod := appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "istio-system", Name: "istiod-1-29", Labels: istiodLabels},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: istiodLabels},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "discovery", Image: "reg.example/istio/pilot:1.29.0"}}}}},
	}
	pod := func(ns, name, node string, labels map[string]string, proxy string) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "app:1"}}}}
		if proxy != "" {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "istio-proxy", Image: proxy})
		}
		return p
	}
	objects := func(extra ...corev1.Pod) inventory.Objects {
		return inventory.Objects{
			Deployments: []appsv1.Deployment{istiod},
			Namespaces: []corev1.Namespace{
				{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"istio.io/rev": "1-28"}}},
				{ObjectMeta: metav1.ObjectMeta{Name: "other", Labels: map[string]string{"istio.io/rev": "1-27"}}},
				{ObjectMeta: metav1.ObjectMeta{Name: "canary", Labels: map[string]string{"istio.io/rev": "1-29"}}},
			},
			Pods: append([]corev1.Pod{
				pod("istio-system", "istiod-1-29-x", "n0", istiodLabels, ""),
				pod("shop", "web-b", "n2", nil, "reg.example/istio/proxyv2:1.28.1"),
				pod("shop", "web-a", "n1", nil, "reg.example/istio/proxyv2:1.28.1"),
				pod("shop", "web-c", "n2", nil, "reg.example/istio/proxyv2:1.28.1"),
				pod("other", "web", "n3", nil, "reg.example/istio/proxyv2:1.27.3"),
			}, extra...),
		}
	}
	waypoint := pod("mesh", "waypoint-x", "n4", map[string]string{istio.LabelGatewayManaged: istio.GatewayManagedWaypoint, istio.LabelK8sGatewayName: "waypoint"}, "reg.example/istio/proxyv2:1.28.1")
	waypoint.Annotations = map[string]string{istio.LabelRev: "1-28"}
	sidecars := v1alpha1.RevisionMigrationSpec{From: "1-28", To: "1-29"}
	waypoints := v1alpha1.RevisionMigrationSpec{From: "1-28", To: "1-29", Waypoints: v1alpha1.WaypointsOnly}
	const proxy, istiodFor = "RevisionMigration m's revision 1-29 (its sidecar proxy)", "RevisionMigration m's revision 1-29 (its istiod)"
	for _, tc := range []struct {
		name string
		spec v1alpha1.RevisionMigrationSpec
		o    inventory.Objects
		want []precheck.Pull
	}{
		{"derived from istiod", sidecars, objects(), []precheck.Pull{
			{For: proxy, Images: []string{"reg.example/istio/proxyv2:1.29.0"}, Nodes: []string{"n1", "n2"}},
			{For: istiodFor, Images: []string{"reg.example/istio/pilot:1.29.0"}, Nodes: []string{"n0"}},
		}},
		{"what 1-29's sidecars run", sidecars, objects(pod("canary", "web", "n3", nil, "mirror.example/proxy:1.29.0-distroless")), []precheck.Pull{
			{For: proxy, Images: []string{"mirror.example/proxy:1.29.0-distroless"}, Nodes: []string{"n1", "n2"}},
			{For: istiodFor, Images: []string{"reg.example/istio/pilot:1.29.0"}, Nodes: []string{"n0"}},
		}},
		{"waypoints: Only: the waypoints' nodes", waypoints, objects(waypoint), []precheck.Pull{
			{For: "RevisionMigration m's revision 1-29 (its waypoint proxy)", Images: []string{"reg.example/istio/proxyv2:1.29.0"}, Nodes: []string{"n4"}},
			{For: istiodFor, Images: []string{"reg.example/istio/pilot:1.29.0"}, Nodes: []string{"n0"}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv, err := inventory.Build(inventory.Options{}, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if got := Pulls("m", tc.spec, inv, tc.o, "istio-system"); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Pulls:\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}
