package health

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/wire"
)

// TestJudgeFailsOnLostEnrollmentWhateverTheTraffic: the same quiet traffic
// passes with every pod enrolled after the swap, and fails, naming the pod
// and the check, when one pod lost its listeners; the summary says what the
// traffic alone decided (Pass) and carries the count.
func TestJudgeFailsOnLostEnrollmentWhateverTheTraffic(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	snap := func(at time.Duration, n uint64, e *wire.Enrollment) wire.Snapshot {
		var pods []wire.PodCounters
		for _, name := range []string{"a", "b"} {
			pods = append(pods, wire.PodCounters{Namespace: "shop", Name: name, UID: name, Side: wire.SideApp, Connects: n,
				ConnectLatency: wire.Log2Histogram{Buckets: make([]uint64, wire.Log2Buckets)}, SRTT: wire.Log2Histogram{Buckets: make([]uint64, wire.Log2Buckets)},
				ConnAges: make([]uint64, len(wire.AgeBucketBoundsSeconds)+1)})
		}
		return wire.Snapshot{Node: "n1", Time: t0.Add(at), StartTime: t0, Mode: wire.ModeEBPF, Pods: pods, Enrollment: e}
	}
	both := &wire.Enrollment{Pods: []wire.PodEnrollment{{Namespace: "shop", Name: "a", UID: "a", Result: wire.Enrolled}, {Namespace: "shop", Name: "b", UID: "b", Result: wire.Enrolled}}}
	lost := &wire.Enrollment{Pods: []wire.PodEnrollment{{Namespace: "shop", Name: "a", UID: "a", Result: wire.Enrolled},
		{Namespace: "shop", Name: "b", UID: "b", Result: wire.NotEnrolled, Failed: wire.CheckListeners, Detail: "nothing listens on 15008"}}}
	// A pod scheduled onto the node during the soak (not in the baseline)
	// that istio-cni never enrolled fails the node too.
	newPod := &wire.Enrollment{Pods: append(append([]wire.PodEnrollment(nil), both.Pods...),
		wire.PodEnrollment{Namespace: "shop", Name: "c", UID: "c", Result: wire.NotEnrolled, Failed: wire.CheckRedirection, Detail: "no table inet istio-proxy-nat"})}
	for _, c := range []struct {
		after   *wire.Enrollment
		outcome Outcome
		count   string
		reason  string
	}{
		{both, Pass, "enrolled 2/2", ""},
		{lost, Fail, "enrolled 1/2", "pod shop/b was enrolled before the swap and is not after it: listeners failed: nothing listens on 15008"},
		{newPod, Fail, "enrolled 2/3", "pod shop/c, new on the node since the swap, is not enrolled: redirection failed: no table inet istio-proxy-nat"},
	} {
		cur := snap(4*time.Minute, 4000, c.after)
		j, err := NewJudge(JudgeConfig{Source: SnapshotFunc(func(context.Context, string) (wire.Snapshot, error) { return cur, nil }), Now: func() time.Time { return cur.Time }})
		if err != nil {
			t.Fatal(err)
		}
		v, err := j.Judge(context.Background(), Input{
			Node: "n1", Gates: Config{Inconclusive: v1alpha1.InconclusivePass},
			Baseline:  []wire.Snapshot{snap(0, 0, both), snap(time.Minute, 1000, both), snap(2*time.Minute, 2000, both)},
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
