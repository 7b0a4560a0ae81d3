package observe

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestServerClockFromTheWriteStamp: the API server's clock is read from
// the managed-fields time it stamped on this manager's last Update (to the
// second), against the middle of the request's span; other managers' and
// subresources' entries say nothing about it.
func TestServerClockFromTheWriteStamp(t *testing.T) {
	local := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	stamp := metav1.NewTime(local.Add(7 * time.Second)) // the server is 7.5 s ahead (to the second)
	other := metav1.NewTime(local.Add(-time.Hour))
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{
		{Manager: "kured", Operation: metav1.ManagedFieldsOperationUpdate, Time: &other},
		{Manager: "nodewise", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status", Time: &other},
		{Manager: "nodewise", Operation: metav1.ManagedFieldsOperationUpdate, Time: &stamp},
	}}}
	var c ServerClock
	if got := c.Now(local); !got.Equal(local) {
		t.Fatalf("before a measure: %s, want the local clock", got)
	}
	if moved, ok := c.Observe(ds, "nodewise", local.Add(-100*time.Millisecond), local.Add(100*time.Millisecond)); !ok || moved != 7500*time.Millisecond {
		t.Fatalf("measure from nodewise's entry: moved %s (%t), want 7.5s", moved, ok)
	}
	if got, want := c.Now(local), local.Add(7500*time.Millisecond); !got.Equal(want) {
		t.Errorf("API server's time %s, want %s", got, want)
	}
	if _, ok := c.Observe(&appsv1.DaemonSet{}, "nodewise", local, local); ok || !c.Now(local).Equal(local.Add(7500*time.Millisecond)) {
		t.Error("an answer without the entry changed the measure")
	}
}
