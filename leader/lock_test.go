package leader

import (
	"context"
	"testing"
	"time"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// The holder writes its build on the Lease when it creates it and with every
// renewal, over whatever build a previous holder wrote there: the annotation
// is always the version of the process that holds the Lease.
func TestLeaseCarriesHolderVersion(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset()
	l := newWatchedLease(kube, "nodewise-system", "nodewise-orchestrator", "pod-a", "v1.2.3", zap.NewNop())
	now := metav1.NewTime(time.Now())
	rec := resourcelock.LeaderElectionRecord{HolderIdentity: "pod-a", LeaseDurationSeconds: 15, AcquireTime: now, RenewTime: now}
	if err := l.Create(ctx, rec); err != nil {
		t.Fatal(err)
	}
	got := func() string {
		lease, err := kube.CoordinationV1().Leases("nodewise-system").Get(ctx, "nodewise-orchestrator", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return lease.Annotations[VersionAnnotation]
	}
	if v := got(); v != "v1.2.3" {
		t.Fatalf("created Lease: %s %q, want %q", VersionAnnotation, v, "v1.2.3")
	}
	// An older holder's build on the Lease is replaced by the next renewal.
	l.lease.Annotations[VersionAnnotation] = "v0.0.1-older"
	if err := l.Update(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if v := got(); v != "v1.2.3" {
		t.Fatalf("renewed Lease: %s %q, want %q", VersionAnnotation, v, "v1.2.3")
	}
}
