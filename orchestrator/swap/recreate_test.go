package swap

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
)

// TestReplaceRecreatesAStuckPodOnce: the replace swap's new pod is still
// not Ready half way through the swap timeout; it is deleted once, the
// node recording it first, and the DaemonSet controller's next pod is
// waited for until the deadline. Stuck once: the node passes. Stuck twice:
// the swap halts, naming both tries; the second is not recreated.
func TestReplaceRecreatesAStuckPodOnce(t *testing.T) {
	for _, twice := range []bool{false, true} {
		c := newCluster(t, fixture.SurgeDS, fixture.SurgePod("old", "old", 0))
		if err := c.kube.Tracker().Add(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}); err != nil {
			t.Fatal(err)
		}
		deadline := c.now.Add(time.Second) // half the timeout is long past
		made := 0
		c.controller = func(*corev1.Pod) {
			made++
			p := fixture.SurgePod("new-"+string(rune('0'+made)), "new", time.Hour, crashLooping)
			if made == 2 && !twice {
				running(true)(p)
			}
			if made == 2 {
				c.now = deadline // the successor's wait ends at the deadline
			}
			c.put(p)
			c.sync()
		}
		r := c.replace()
		r.Recreate = &Recreate{Kube: c.kube, Log: zap.NewNop(), Now: func() time.Time { return c.now }}
		err := r.Swap(context.Background(), fixture.ZtunnelTarget, "n1", deadline, time.Minute)
		writes, _ := c.podWrites()
		if strings.Join(writes, ",") != "delete old,delete new-1" {
			t.Errorf("twice %v: pod writes %v; want the old pod and the stuck one deleted, nothing more", twice, writes)
		}
		n, gerr := c.kube.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
		if gerr != nil {
			t.Fatal(gerr)
		}
		var rec Recreated
		if jerr := json.Unmarshal([]byte(n.Annotations[AnnotationRecreatedPrefix+"ztunnel"]), &rec); jerr != nil || rec.UID != "new-1-uid" || !rec.Attempt.Equal(deadline) {
			t.Errorf("twice %v: the node's record %q (%v); want the recreate of new-1 for this attempt", twice, n.Annotations[AnnotationRecreatedPrefix+"ztunnel"], jerr)
		}
		switch {
		case !twice && err != nil:
			t.Errorf("stuck once: %v; want the successor Ready", err)
		case twice && (halt(err) != nodestep.HaltSwapTimeout || !strings.Contains(err.Error(), "new-2") || !strings.Contains(err.Error(), "new-1 (uid new-1-uid), was stuck not Ready (CrashLoopBackOff, 3 restarts) too and was recreated once")):
			t.Errorf("stuck twice: %v; want a swap timeout naming new-2 and the recreated new-1", err)
		}
	}
}
