package upgradecheck

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	admv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// TestHoldNamesTheFindingKeepsItForTheTTLAndFailsClosed: a tag on a
// revision no istiod serves holds the rollout, saying so; the hold stands
// for TTL (a held rollout's resyncs read nothing) and is read again after
// it, when the fix shows; a listing the API refuses holds too.
func TestHoldNamesTheFindingKeepsItForTheTTLAndFailsClosed(t *testing.T) {
	ctx := context.Background()
	tag := &admv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "istio-revision-tag-prod",
		Labels: map[string]string{"istio.io/tag": "prod", "istio.io/rev": "1-27"}}}
	kube := fake.NewClientset(tag)
	now := time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)
	r := &Reader{Kube: kube, Now: func() time.Time { return now }}
	nr := &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: "r", UID: "uid-r", Generation: 1}}

	want := "precheck found 1 error (nodewise precheck shows them): Error revision-tags: tag prod: points at revision 1-27, which no istiod serves"
	if got := r.Hold(ctx, nr, nil, nil); !strings.HasPrefix(got, want) {
		t.Fatalf("hold %q, want it to start %q", got, want)
	}
	if err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(ctx, tag.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(TTL / 2)
	if got := r.Hold(ctx, nr, nil, nil); !strings.HasPrefix(got, want) {
		t.Errorf("within the TTL: hold %q, want the kept one", got)
	}
	now = now.Add(TTL)
	if got := r.Hold(ctx, nr, nil, nil); got != "" {
		t.Errorf("past the TTL, fixed: hold %q, want none", got)
	}

	kube.PrependReactor("list", "namespaces", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "namespaces"}, "", errors.New("RBAC"))
	})
	if got := r.Hold(ctx, nr, nil, nil); !strings.HasPrefix(got, "precheck could not read the cluster: ") || !strings.Contains(got, "forbidden") {
		t.Errorf("namespaces forbidden: hold %q, want it to hold, saying why", got)
	}
}
