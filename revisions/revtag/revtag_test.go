package revtag

import (
	"context"
	"errors"
	"sort"
	"strings"
	"testing"

	admv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/istio/inventory"
)

func injector(rev, url string) *admv1.MutatingWebhookConfiguration {
	none := admv1.SideEffectClassNone
	return &admv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "istio-sidecar-injector-" + rev, Labels: map[string]string{
			istio.LabelRev: rev, "app": "sidecar-injector", "install.operator.istio.io/owning-resource": "x", "istio.io/owned-by": "me"}},
		Webhooks: []admv1.MutatingWebhook{{
			Name:                    "rev.namespace.sidecar-injector.istio.io",
			ClientConfig:            admv1.WebhookClientConfig{URL: &url, CABundle: []byte("CA")},
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}
}

func matches(t *testing.T, s *metav1.LabelSelector, l map[string]string) bool {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		t.Fatal(err)
	}
	return sel.Matches(labels.Set(l))
}

func TestBuildWebhook(t *testing.T) {
	wh, err := BuildWebhook(injector("1-28", "https://127.0.0.1:1/inject"), "canary")
	if err != nil {
		t.Fatal(err)
	}
	if wh.Name != "istio-revision-tag-canary" || wh.Labels[istio.LabelTag] != "canary" || wh.Labels[istio.LabelRev] != "1-28" {
		t.Fatalf("name/labels wrong: %s %v", wh.Name, wh.Labels)
	}
	if _, ok := wh.Labels["install.operator.istio.io/owning-resource"]; ok {
		t.Fatal("installer ownership label copied onto a user-managed tag")
	}
	if wh.Labels["istio.io/owned-by"] != "me" {
		t.Fatal("revision labels not carried over")
	}
	if len(wh.Webhooks) != 2 {
		t.Fatalf("want 2 webhooks for a non-default tag, got %d", len(wh.Webhooks))
	}
	nsHook, objHook := wh.Webhooks[0], wh.Webhooks[1]
	if *nsHook.ClientConfig.URL != "https://127.0.0.1:1/inject" || string(nsHook.ClientConfig.CABundle) != "CA" {
		t.Fatal("client config not derived from the revision")
	}
	if !matches(t, nsHook.NamespaceSelector, map[string]string{istio.LabelRev: "canary"}) ||
		matches(t, nsHook.NamespaceSelector, map[string]string{istio.LabelRev: "1-27"}) ||
		matches(t, nsHook.NamespaceSelector, map[string]string{istio.LabelRev: "canary", istio.LabelInjection: "enabled"}) {
		t.Fatal("namespace hook selects the wrong namespaces")
	}
	if matches(t, nsHook.ObjectSelector, map[string]string{istio.LabelInject: "false"}) {
		t.Fatal("sidecar.istio.io/inject=false pods are injected")
	}
	if !matches(t, objHook.NamespaceSelector, map[string]string{}) || !matches(t, objHook.ObjectSelector, map[string]string{istio.LabelRev: "canary"}) ||
		matches(t, objHook.ObjectSelector, map[string]string{}) {
		t.Fatal("object hook selects the wrong pods")
	}
	def, _ := BuildWebhook(injector("1-27", "u"), istio.DefaultTag)
	if len(def.Webhooks) != 4 || !matches(t, def.Webhooks[2].NamespaceSelector, map[string]string{istio.LabelInjection: "enabled"}) {
		t.Fatal("default tag does not take istio-injection=enabled")
	}
}

func TestSet(t *testing.T) {
	ctx := context.Background()
	c := fake.NewSimpleClientset(injector("1-27", "https://a/inject"), injector("1-28", "https://b/inject"),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{istio.LabelRev: "canary"}}})
	o := SetOptions{Tag: "canary", Revision: "1-27"}
	if err := Set(ctx, c, o); err != nil {
		t.Fatal(err)
	}
	o.Revision = "1-28"
	if err := Set(ctx, c, o); !errors.Is(err, ErrTagExists) {
		t.Fatalf("moving without --overwrite: %v", err)
	}
	if rev, _ := Get(ctx, c, "canary"); rev != "1-27" {
		t.Fatalf("refused move changed the tag to %s", rev)
	}
	o.Overwrite = true
	if err := Set(ctx, c, o); err != nil {
		t.Fatal(err)
	}
	tags, err := List(ctx, c, "istio-system")
	if err != nil {
		t.Fatal(err)
	}
	if len(tags) != 1 || tags[0].Revision != "1-28" || len(tags[0].Namespaces) != 1 || tags[0].Namespaces[0] != "shop" {
		t.Fatalf("list = %+v", tags)
	}
	if err := Set(ctx, c, SetOptions{Tag: "x", Revision: "1-99"}); !errors.Is(err, ErrUnknownRevision) {
		t.Fatalf("unknown revision: %v", err)
	}
	if err := Set(ctx, c, SetOptions{Tag: "1-27", Revision: "1-28"}); !errors.Is(err, ErrTagIsRevision) {
		t.Fatalf("tag named like a revision: %v", err)
	}
	if err := Remove(ctx, c, "nope", "istio-system"); !errors.Is(err, ErrUnknownTag) {
		t.Fatalf("removing an unknown tag: %v", err)
	}
	if err := Remove(ctx, c, "canary", "istio-system"); err == nil {
		t.Fatal("removed a tag namespaces still use")
	}
}

func TestRemovalBlockers(t *testing.T) {
	inv := inventory.Inventory{
		Tags: map[string]string{"canary": "1-28", "default": "1-27"},
		Pods: []inventory.Pod{{Namespace: "a", Revision: "1-27"}, {Namespace: "a", Revision: "1-27"}, {Namespace: "b", Revision: "1-28"}},
	}
	if b := RemovalBlockers(inv, "1-27", nil); len(b) != 2 || b[0] != "2 proxies in namespace a" || b[1] != "tag default" {
		t.Fatalf("blockers = %q", b)
	}
	if b := RemovalBlockers(inv, "1-26", nil); len(b) != 0 {
		t.Fatalf("unused revision blocked by %q", b)
	}
	// Waypoints on the revision are named first, their pods not counted
	// again as the namespace's proxies.
	inv.Pods = append(inv.Pods, inventory.Pod{Namespace: "m", Name: "wp-1", Mode: inventory.ModeWaypoint, Waypoint: "wp", Revision: "1-26"})
	inv.Waypoints = []inventory.Waypoint{{Namespace: "m", Name: "wp", Revision: "1-26"}, {Namespace: "n", Name: "reviews", Revision: "1-26"}, {Namespace: "o", Name: "wp", Revision: "1-28"}}
	if b := RemovalBlockers(inv, "1-26", nil); len(b) != 1 || b[0] != "waypoints m/wp, n/reviews use it (move them first: a RevisionMigration with waypoints: Only)" {
		t.Fatalf("blockers of a revision only waypoints use = %q", b)
	}
	// A waypoint Gateway served from the revision with no pod (scaled to
	// zero) blocks too, named once beside those that run.
	if b := RemovalBlockers(inv, "1-26", []string{"n/reviews", "p/idle"}); len(b) != 1 || b[0] != "waypoints m/wp, n/reviews, p/idle use it (move them first: a RevisionMigration with waypoints: Only)" {
		t.Fatalf("blockers with a waypoint scaled to zero = %q", b)
	}
	if b := RemovalBlockers(inventory.Inventory{}, "1-26", []string{"p/idle"}); len(b) != 1 {
		t.Fatalf("a revision only a scaled-down waypoint uses: blockers %q, want it named", b)
	}
}

// When the revision has an istiod Service, the tag gets istioctl's tag
// Service, and moving the tag moves it (else istioctl would list the tag twice).
func TestSetKeepsTagServiceInStep(t *testing.T) {
	ctx := context.Background()
	svc := func(rev string) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "istio-system", Name: "istiod-" + rev, Labels: map[string]string{istio.LabelRev: rev, "app": "istiod", "operator.istio.io/component": "Pilot"}},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "grpc-xds", Port: 15010}}},
		}
	}
	c := fake.NewSimpleClientset(injector("1-27", "u"), injector("1-28", "u"), svc("1-27"), svc("1-28"))
	if err := Set(ctx, c, SetOptions{Tag: "prod", Revision: "1-27"}); err != nil {
		t.Fatal(err)
	}
	got, err := c.CoreV1().Services("istio-system").Get(ctx, ServicePrefix+"prod", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels[istio.LabelTag] != "prod" || got.Labels[istio.LabelRev] != "1-27" || got.Spec.Selector[istio.LabelRev] != "1-27" || len(got.Spec.Ports) != 1 {
		t.Fatalf("tag service %+v", got)
	}
	if _, ok := got.Labels["operator.istio.io/component"]; ok {
		t.Fatal("installer label copied onto the tag service")
	}
	if err := Set(ctx, c, SetOptions{Tag: "prod", Revision: "1-28", Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	got, _ = c.CoreV1().Services("istio-system").Get(ctx, ServicePrefix+"prod", metav1.GetOptions{})
	if got.Labels[istio.LabelRev] != "1-28" || got.Spec.Selector[istio.LabelRev] != "1-28" {
		t.Fatalf("tag service not moved: %+v", got)
	}
	tags, _ := List(ctx, c, "istio-system")
	if len(tags) != 1 || tags[0].Revision != "1-28" {
		t.Fatalf("list after move: %+v", tags)
	}
}

// TestServedWaypointsResolveAsIstiodDoes: a waypoint Gateway is served from
// its own istio.io/rev, else its namespace's, else the default tag, a tag
// resolving to its revision; Gateways of another class are no waypoints.
// None of them has a pod: a waypoint scaled to zero still uses its revision.
func TestServedWaypointsResolveAsIstiodDoes(t *testing.T) {
	gw := func(ns, name, class, rev string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
			"metadata": map[string]any{"namespace": ns, "name": name},
			"spec":     map[string]any{"gatewayClassName": class},
		}}
		if rev != "" {
			u.SetLabels(map[string]string{istio.LabelRev: rev})
		}
		return u
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{gatewaysGVR: "GatewayList"})
	for _, g := range []*unstructured.Unstructured{
		gw("a", "own", istio.WaypointGatewayClass, "1-26"),
		gw("b", "from-namespace", istio.WaypointGatewayClass, ""),
		gw("c", "default-tag", istio.WaypointGatewayClass, ""),
		gw("c", "by-tag", istio.WaypointGatewayClass, "stable"),
		gw("a", "ingress", "istio", "1-26"),
	} {
		if _, err := dyn.Resource(gatewaysGVR).Namespace(g.GetNamespace()).Create(context.Background(), g, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	kube := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "b", Labels: map[string]string{istio.LabelRev: "1-26"}}})
	tags := map[string]string{"default": "1-28", "stable": "1-26"}
	got, err := servedWaypoints(context.Background(), kube, dyn, tags, "1-26")
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(got)
	if want := "a/own b/from-namespace c/by-tag"; strings.Join(got, " ") != want {
		t.Errorf("served from 1-26: %v, want %s", got, want)
	}
	if got, _ := servedWaypoints(context.Background(), kube, dyn, tags, "1-28"); strings.Join(got, " ") != "c/default-tag" {
		t.Errorf("served from 1-28: %v, want c/default-tag (the default tag's)", got)
	}
}
