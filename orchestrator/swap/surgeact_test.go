package swap

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
)

// TestSurgeFailedBridgeHalts: #27 finding 2. A bridge the kubelet rejects
// (phase Failed, OutOfcpu) ends the swap with ErrSurgeBridgeFailed and its
// reason, at once and well within the swap timeout, and the failed bridge
// is deleted; the old pod is never touched. Both views: one that shows the
// Failed pod, and one that drops it (the create then meets AlreadyExists,
// which used to count as success: one create a second, forever).
func TestSurgeFailedBridgeHalts(t *testing.T) {
	for _, hide := range []bool{false, true} {
		name := map[bool]string{false: "the view shows the Failed bridge", true: "the view drops Failed pods"}[hide]
		t.Run(name, func(t *testing.T) {
			old := fixture.SurgePod("old", "old", 0)
			b := BridgePod(fixture.SurgeDS, fixture.SurgeRev, "n1", old)
			b.UID, b.CreationTimestamp = "b-uid", metav1.NewTime(fixture.SurgeT0.Add(time.Minute))
			fixture.OutOfCPU(b)
			kube := fake.NewClientset(old.DeepCopy(), b.DeepCopy())
			observe := func(ctx context.Context) (SurgeInput, error) {
				pl, err := kube.CoreV1().Pods("istio-system").List(ctx, metav1.ListOptions{})
				if err != nil {
					return SurgeInput{}, err
				}
				var pods []*corev1.Pod
				for i := range pl.Items {
					if hide && pl.Items[i].Status.Phase == corev1.PodFailed {
						continue
					}
					pods = append(pods, &pl.Items[i])
				}
				return SurgeInput{DaemonSet: fixture.SurgeDS, Revision: fixture.SurgeRev, Node: "n1", Pods: pods}, nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s := Surger{Kube: kube, Poll: time.Millisecond, Observe: observe, BridgeTimeout: 5 * time.Minute}
			_, err := s.Swap(ctx, fixture.ZtunnelTarget, "n1", time.Now().Add(5*time.Minute))
			if !errors.Is(err, ErrSurgeBridgeFailed) || !strings.Contains(err.Error(), "OutOfcpu") {
				t.Fatalf("swap with a rejected bridge: %v; want ErrSurgeBridgeFailed naming OutOfcpu", err)
			}
			if _, gerr := kube.CoreV1().Pods("istio-system").Get(ctx, b.Name, metav1.GetOptions{}); !apierrors.IsNotFound(gerr) {
				t.Errorf("the failed bridge is still there: %v", gerr)
			}
			if _, gerr := kube.CoreV1().Pods("istio-system").Get(ctx, "old", metav1.GetOptions{}); gerr != nil {
				t.Errorf("the old pod: %v", gerr)
			}
			if got := SurgeLeftovers(SurgeInput{DaemonSet: fixture.SurgeDS, Revision: fixture.SurgeRev, Node: "n1", Pods: []*corev1.Pod{old, b}}); len(got) != 1 || got[0].Name != b.Name {
				t.Errorf("leftovers %v; want the Failed bridge", got)
			}
		})
	}
}

// TestSurgeRepeatedCreatePastTheDeadlineTimesOut: a bridge this swap
// created that the view never shows is not waited for forever: the
// deadline holds on the create branch too.
func TestSurgeRepeatedCreatePastTheDeadlineTimesOut(t *testing.T) {
	old := fixture.SurgePod("old", "old", 0)
	kube := fake.NewClientset(old.DeepCopy())
	now := fixture.SurgeT0.Add(time.Hour)
	looks := 0
	s := Surger{Kube: kube, Poll: time.Millisecond, Now: func() time.Time { return now },
		Observe: func(context.Context) (SurgeInput, error) {
			// The third look (after the create and one wait for its own
			// write) is past the deadline and the wait for its own write.
			// The clock moves on the swap's goroutine: no data race.
			if looks++; looks == 3 {
				now = now.Add(ownWriteWait + time.Minute)
			}
			return SurgeInput{DaemonSet: fixture.SurgeDS, Revision: fixture.SurgeRev, Node: "n1", Pods: []*corev1.Pod{old}}, nil
		}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := s.Swap(ctx, fixture.ZtunnelTarget, "n1", now.Add(time.Second))
	if !errors.Is(err, ErrSurgeTimeout) {
		t.Fatalf("swap whose bridge never shows: %v; want ErrSurgeTimeout", err)
	}
}
