package orchestrator

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// TestTrimCachedDropsManagedFields: cached copies carry no managedFields,
// and a tombstone passes through.
func TestTrimCachedDropsManagedFields(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}}}
	out, err := trimCached(pod)
	if err != nil || len(out.(*corev1.Pod).ManagedFields) != 0 || out.(*corev1.Pod).Name != "p" {
		t.Errorf("trimCached(pod) = %+v, %v", out, err)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "ns/p", Obj: pod}
	if out, err := trimCached(tomb); err != nil || out != any(tomb) {
		t.Errorf("trimCached(tombstone) = %+v, %v", out, err)
	}
}
