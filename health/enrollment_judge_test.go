package health

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// TestJudgeFailsOnLostEnrollmentWhateverTheTraffic: the same quiet traffic
// passes with every pod enrolled after the swap, and fails, naming the pod
// and the check, when one pod lost its listeners; the summary says what the
// traffic alone decided (Pass) and carries the count.
func TestJudgeFailsOnLostEnrollmentWhateverTheTraffic(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	snap := func(at time.Duration, n uint64, e *Enrollment) Snapshot {
		var pods []PodCounters
		for _, name := range []string{"a", "b"} {
			pods = append(pods, PodCounters{Namespace: "shop", Name: name, UID: name, Side: SideApp, Connects: n,
				ConnectLatency: Log2Histogram{Buckets: make([]uint64, Log2Buckets)}, SRTT: Log2Histogram{Buckets: make([]uint64, Log2Buckets)},
				ConnAges: make([]uint64, len(AgeBucketBoundsSeconds)+1)})
		}
		return Snapshot{Node: "n1", Time: t0.Add(at), StartTime: t0, Mode: ModeEBPF, Pods: pods, Enrollment: e}
	}
	both := &Enrollment{Pods: []PodEnrollment{{Namespace: "shop", Name: "a", UID: "a", Result: Enrolled}, {Namespace: "shop", Name: "b", UID: "b", Result: Enrolled}}}
	lost := &Enrollment{Pods: []PodEnrollment{{Namespace: "shop", Name: "a", UID: "a", Result: Enrolled},
		{Namespace: "shop", Name: "b", UID: "b", Result: NotEnrolled, Failed: CheckListeners, Detail: "nothing listens on 15008"}}}
	// A pod scheduled onto the node during the soak (not in the baseline)
	// that istio-cni never enrolled fails the node too.
	newPod := &Enrollment{Pods: append(append([]PodEnrollment(nil), both.Pods...),
		PodEnrollment{Namespace: "shop", Name: "c", UID: "c", Result: NotEnrolled, Failed: CheckRedirection, Detail: "no table inet istio-proxy-nat"})}
	for _, c := range []struct {
		after   *Enrollment
		outcome Outcome
		count   string
		reason  string
	}{
		{both, Pass, "enrolled 2/2", ""},
		{lost, Fail, "enrolled 1/2", "pod shop/b was enrolled before the swap and is not after it: listeners failed: nothing listens on 15008"},
		{newPod, Fail, "enrolled 2/3", "pod shop/c, new on the node since the swap, is not enrolled: redirection failed: no table inet istio-proxy-nat"},
	} {
		cur := snap(4*time.Minute, 4000, c.after)
		j, err := NewJudge(JudgeConfig{Source: SnapshotFunc(func(context.Context, string) (Snapshot, error) { return cur, nil }), Now: func() time.Time { return cur.Time }})
		if err != nil {
			t.Fatal(err)
		}
		v, err := j.Judge(context.Background(), Input{
			Node: "n1", Gates: Config{Inconclusive: v1alpha1.InconclusivePass},
			Baseline:  []Snapshot{snap(0, 0, both), snap(time.Minute, 1000, both), snap(2*time.Minute, 2000, both)},
			SoakStart: snap(3*time.Minute, 3000, both),
		})
		if err != nil {
			t.Fatal(err)
		}
		all := strings.Join(v.Reasons, "; ")
		if v.Outcome != c.outcome || v.Summary.Enrollment != c.count || v.Summary.TrafficOutcome == Fail || !strings.Contains(all, c.count) {
			t.Errorf("after %s: %s (%s), summary enrollment %q, traffic %q; want %s with %q and a traffic outcome that is not Fail",
				c.count, v.Outcome, all, v.Summary.Enrollment, v.Summary.TrafficOutcome, c.outcome, c.count)
		}
		if c.reason != "" && !strings.Contains(all, c.reason) {
			t.Errorf("fail reasons %q: want %q", all, c.reason)
		}
	}
}
