package preflight

import (
	"context"
	"reflect"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/istio/inventory"
)

// TestControlPlaneCacheMatchesList: the informer-fed control plane preflight
// reads is what listing the istiod Deployments and tag webhooks gives.
func TestControlPlaneCacheMatchesList(t *testing.T) {
	kube := fake.NewClientset(
		dep("istio-system", "istiod-1-28-1", map[string]string{"app": "istiod", istio.LabelRev: "1-28-1"}, "istio/pilot:1.28.1", 1),
		dep("istio-system", "istiod-1-27-3", map[string]string{"app": "istiod", istio.LabelRev: "1-27-3"}, "istio/pilot:1.27.3", 0),
		dep("istio-system", "other", map[string]string{"app": "other"}, "x/other:9.9.9", 1),
		dep("elsewhere", "istiod", map[string]string{"app": "istiod"}, "istio/pilot:1.20.0", 1),
		wh("istio-revision-tag-prod", map[string]string{istio.LabelTag: "prod", istio.LabelRev: "1-28-1"}),
		wh("unrelated", map[string]string{"x": "y"}),
	)
	c := NewControlPlaneCache(kube, "istio-system")
	if c.Synced() {
		t.Fatal("synced before its informers ran: preflight would never list (nor halt on a refusal)")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.Synced) {
		t.Fatal("control-plane cache never synced")
	}
	now := time.Unix(1000, 0)
	got, err := c.observe(now)
	if err != nil {
		t.Fatal(err)
	}
	want := controlPlane{at: now, tags: map[string]string{"prod": "1-28-1"}}
	if want.revisions, err = inventory.Revisions(ctx, kube, inventory.Options{IstioNamespace: "istio-system"}, want.tags); err != nil {
		t.Fatal(err)
	}
	if len(want.revisions) != 2 {
		t.Fatalf("the list itself saw %d istiod revisions, want 2: %+v", len(want.revisions), want.revisions)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("from the cache:\n %+v\nlisted:\n %+v", got, want)
	}
}
