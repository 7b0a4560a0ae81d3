package inventory

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodewise/nodewise/istio"
)

func TestImageTag(t *testing.T) {
	for in, want := range map[string]string{
		"docker.io/istio/proxyv2:1.27.3":                 "1.27.3",
		"localhost:5000/istio/proxyv2:1.28.0":            "1.28.0",
		"localhost:5000/istio/proxyv2":                   Unknown,
		"istio/proxyv2@sha256:abcd":                      Unknown,
		"gcr.io/istio-release/proxyv2:1.27.1-distroless": "1.27.1-distroless",
	} {
		if got := ImageTag(in); got != want {
			t.Errorf("ImageTag(%q) = %q, want %q", in, got, want)
		}
	}
}

func sidecarPod(ns, name, image, status string, labels map[string]string, native bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, Annotations: map[string]string{}}}
	p.Spec.NodeName = "n1"
	p.Spec.Containers = []corev1.Container{{Name: "app", Image: "app:1"}}
	proxy := corev1.Container{Name: istio.ProxyContainer, Image: image}
	if native {
		p.Spec.InitContainers = append(p.Spec.InitContainers, proxy)
	} else {
		p.Spec.Containers = append(p.Spec.Containers, proxy)
	}
	if status != "" {
		p.Annotations[istio.AnnotationSidecarStatus] = status
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	return p
}

func TestClassifyPod(t *testing.T) {
	tags := map[string]string{"canary": "1-28", "default": "1-27"}
	nodes := map[string]Node{"n1": {Name: "n1", Ztunnel: "1.27.3", ZtunnelRevision: "1-27"}}
	sidecarNS := Namespace{Name: "a", Mode: ModeSidecar, Rev: "canary", Revision: "1-28"}
	for _, tc := range []struct {
		name     string
		pod      *corev1.Pod
		ns       Namespace
		want     Pod
		excluded bool
	}{
		{name: "status annotation wins", pod: sidecarPod("a", "p", "istio/proxyv2:1.27.3", `{"containers":["istio-proxy"],"revision":"1-27"}`, map[string]string{istio.LabelRev: "canary"}, false),
			ns: sidecarNS, want: Pod{Mode: ModeSidecar, Revision: "1-27", Version: "1.27.3"}},
		{name: "native sidecar, pod label tag resolved", pod: sidecarPod("a", "p", "istio/proxyv2:1.28.0", "", map[string]string{istio.LabelRev: "canary"}, true),
			ns: sidecarNS, want: Pod{Mode: ModeSidecar, Revision: "1-28", Version: "1.28.0"}},
		{name: "namespace label fallback", pod: sidecarPod("a", "p", "istio/proxyv2:1.28.0", "not json", nil, false),
			ns: sidecarNS, want: Pod{Mode: ModeSidecar, Revision: "1-28", Version: "1.28.0"}},
		{name: "ambient namespace takes node ztunnel", pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "p"}, Spec: corev1.PodSpec{NodeName: "n1"}},
			ns: Namespace{Name: "b", Mode: ModeAmbient}, want: Pod{Mode: ModeAmbient, Revision: "1-27", Version: "1.27.3"}},
		{name: "ambient pod on node without ztunnel", pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "c", Name: "p", Labels: map[string]string{istio.LabelDataplaneMode: "ambient"}}, Spec: corev1.PodSpec{NodeName: "n9"}},
			want: Pod{Mode: ModeAmbient, Revision: istio.DefaultRevision, Version: Unknown}},
		{name: "unmeshed", pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "d", Name: "p"}}, excluded: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ClassifyPod(tc.pod, tc.ns, tags, nodes)
			if ok == tc.excluded {
				t.Fatalf("in mesh = %v, want %v", ok, !tc.excluded)
			}
			if tc.excluded {
				return
			}
			if got.Mode != tc.want.Mode || got.Revision != tc.want.Revision || got.Version != tc.want.Version {
				t.Fatalf("got mode=%s rev=%s version=%s, want %s %s %s", got.Mode, got.Revision, got.Version, tc.want.Mode, tc.want.Revision, tc.want.Version)
			}
		})
	}
}

func fixture() []runtime.Object {
	istiod := func(rev, image string) *appsv1.Deployment {
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: "istio-system", Name: "istiod-" + rev, Labels: map[string]string{"app": "istiod", istio.LabelRev: rev}},
			Spec:       appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "discovery", Image: image}}}}},
			Status:     appsv1.DeploymentStatus{ReadyReplicas: 1},
		}
	}
	zt := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "istio-system", Name: "ztunnel-x", Labels: map[string]string{"app": "ztunnel"}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "istio-proxy", Image: "istio/ztunnel:1.27.3"}}}}
	cni := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "istio-system", Name: "cni-x", Labels: map[string]string{"k8s-app": "istio-cni-node"}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "install-cni", Image: "istio/install-cni:1.27.2"}}}}
	tag := &admv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "istio-revision-tag-canary", Labels: map[string]string{istio.LabelTag: "canary", istio.LabelRev: "1-28"}}}
	ns := func(name string, labels map[string]string) *corev1.Namespace {
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	}
	amb := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "amb", Name: "a1"}, Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "app"}}}}
	return []runtime.Object{
		istiod("1-27", "istio/pilot:1.27.3"), istiod("1-28", "istio/pilot:1.28.0"), zt, cni, tag,
		ns("a", map[string]string{istio.LabelRev: "1-27"}), ns("b", map[string]string{istio.LabelRev: "canary"}), ns("amb", map[string]string{istio.LabelDataplaneMode: "ambient"}), ns("plain", nil),
		sidecarPod("a", "p1", "istio/proxyv2:1.27.3", `{"revision":"1-27"}`, nil, false),
		sidecarPod("a", "p2", "istio/proxyv2:1.27.3", `{"revision":"1-27"}`, nil, false),
		sidecarPod("b", "p3", "istio/proxyv2:1.28.0", `{"revision":"1-28"}`, nil, false),
		amb,
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "plain", Name: "x"}},
	}
}

func TestObserve(t *testing.T) {
	inv, err := Observe(context.Background(), fake.NewSimpleClientset(fixture()...), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Revisions) != 2 || inv.Revisions[1].Version != "1.28.0" || len(inv.Revisions[1].Tags) != 1 {
		t.Fatalf("revisions = %+v", inv.Revisions)
	}
	if len(inv.Nodes) != 1 || inv.Nodes[0].Ztunnel != "1.27.3" || inv.Nodes[0].CNI != "1.27.2" {
		t.Fatalf("nodes = %+v", inv.Nodes)
	}
	if len(inv.Pods) != 4 {
		t.Fatalf("want 4 meshed pods (3 sidecar, 1 ambient), got %+v", inv.Pods)
	}
	if v, _ := inv.RevisionVersion("canary"); v != "1.28.0" {
		t.Fatalf("canary resolves to version %q", v)
	}
}

func TestCollector(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	c, err := NewCollector(CollectorConfig{Client: fake.NewSimpleClientset(fixture()...), Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	c.Refresh(context.Background())
	want := `
# HELP nodewise_proxy_pods Meshed pods by namespace, proxy revision, proxy version and mode (sidecar or ambient).
# TYPE nodewise_proxy_pods gauge
nodewise_proxy_pods{mode="ambient",namespace="amb",revision="default",version="1.27.3"} 1
nodewise_proxy_pods{mode="sidecar",namespace="a",revision="1-27",version="1.27.3"} 2
nodewise_proxy_pods{mode="sidecar",namespace="b",revision="1-28",version="1.28.0"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "nodewise_proxy_pods"); err != nil {
		t.Fatal(err)
	}
	if _, err := NewCollector(CollectorConfig{Client: fake.NewSimpleClientset()}); err == nil {
		t.Fatal("collector without a registry accepted")
	}
}

// waypointPod is a pod of the Deployment istiod creates for a waypoint
// Gateway: its labels, the template's istio.io/rev annotation (rev, when
// set) and its own istio-proxy.
func waypointPod(ns, gateway, name, rev, image string) *corev1.Pod {
	p := sidecarPod(ns, name, image, "", map[string]string{
		istio.LabelGatewayManaged: istio.GatewayManagedWaypoint, istio.LabelK8sGatewayName: gateway, istio.LabelGatewayName: gateway,
		istio.LabelInject: "false", istio.LabelDataplaneMode: istio.DataplaneModeNone}, false)
	p.Spec.Containers = p.Spec.Containers[1:]
	if rev != "" {
		p.Annotations[istio.LabelRev] = rev
	}
	return p
}

// TestWaypoints: waypoint pods are their own mode (never sidecars), each
// waypoint takes the revision istiod's template wrote, else its
// namespace's (a tag resolved), and a waypoint mid-roll reports its oldest
// pod and says it is rolling.
func TestWaypoints(t *testing.T) {
	objs := append(fixture(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mesh", Labels: map[string]string{istio.LabelDataplaneMode: "ambient", istio.LabelRev: "canary"}}},
		waypointPod("amb", "waypoint", "waypoint-a", "1-27", "istio/proxyv2:1.27.3"),
		waypointPod("mesh", "reviews", "reviews-a", "", "istio/proxyv2:1.28.0"),
		waypointPod("mesh", "waypoint", "waypoint-b", "1-28", "istio/proxyv2:1.28.0"),
		waypointPod("mesh", "waypoint", "waypoint-c", "1-27", "istio/proxyv2:1.27.3"),
	)
	inv, err := Observe(context.Background(), fake.NewSimpleClientset(objs...), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range inv.Pods {
		if strings.HasPrefix(p.Name, "waypoint-") || strings.HasPrefix(p.Name, "reviews-") {
			if p.Mode != ModeWaypoint {
				t.Errorf("pod %s/%s is %s, want waypoint", p.Namespace, p.Name, p.Mode)
			}
		}
	}
	got := fmt.Sprint(inv.Waypoints)
	want := "[{amb waypoint 1-27 1.27.3 1 1 false} {mesh reviews 1-28 1.28.0 1 1 false} {mesh waypoint 1-27 1.27.3 2 2 true}]"
	if got != want {
		t.Fatalf("waypoints\n got %s\nwant %s", got, want)
	}
}
