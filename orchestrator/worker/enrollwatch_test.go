package worker

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/orchestrator/gate"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
)

// enrollGate is a judge gate whose node agent checks enrollment: shop/a and
// shop/b were enrolled before the swap; now (on the test's clock) is what
// a check at that time finds. It records the clock at each check.
type enrollGate struct {
	*judgeGate
	clk *fixture.Clock
	now func(at time.Time) (*wire.Enrollment, error)

	mu      sync.Mutex
	asked   []time.Time
	records []string
}

func (g *enrollGate) Reads() gate.Reads { return gate.Reads{Samples: true, Enrollment: true} }

func (g *enrollGate) Enrollment(_ context.Context, node string, baselineStart, swapStart time.Time, record string) (*wire.Enrollment, *wire.Enrollment, error) {
	at := g.clk.Now()
	g.mu.Lock()
	g.asked = append(g.asked, at)
	g.records = append(g.records, record)
	g.mu.Unlock()
	if node != node1 || swapStart.IsZero() || swapStart.Before(baselineStart) {
		return nil, nil, errors.New("asked for the wrong node or windows")
	}
	cur, err := g.now(at)
	return podsEnrolled(wire.Enrolled), cur, err
}

func (g *enrollGate) checks() []time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]time.Time(nil), g.asked...)
}

// podsEnrolled is shop/a enrolled and shop/b with result b (its check
// failing on listeners when it is not enrolled).
func podsEnrolled(b wire.EnrollmentResult) *wire.Enrollment {
	e := &wire.Enrollment{Pods: []wire.PodEnrollment{
		{Namespace: "shop", Name: "a", UID: "a", Result: wire.Enrolled},
		{Namespace: "shop", Name: "b", UID: "b", Result: b},
	}}
	if b == wire.NotEnrolled {
		e.Pods[1].Failed, e.Pods[1].Detail = wire.CheckListeners, "nothing listens on 15008"
	}
	return e
}

// TestEnrollmentWatchdog drives a node through a five-minute soak on a fake
// clock (it moves only when the worker sleeps) with a fake agent: a pod
// enrolled before the swap that is not enrolled once spec.enrollmentTimeout
// has passed since the soak began fails the node at that check, naming the
// pod and the check, long before the soak's end and without a judgement; one
// enrolled again within the bound, or an agent that cannot answer, lets the
// soak run to its gate.
func TestEnrollmentWatchdog(t *testing.T) {
	soakEnd := t0.Add(longTime)
	for _, tc := range []struct {
		name    string
		bound   time.Duration // spec.enrollmentTimeout; 0: the default
		now     func(at time.Time) (*wire.Enrollment, error)
		failAt  time.Time // zero: the node passes its gate
		firstAt time.Time
	}{
		{name: "listeners never come back", now: func(time.Time) (*wire.Enrollment, error) { return podsEnrolled(wire.NotEnrolled), nil },
			failAt: t0.Add(30 * time.Second), firstAt: t0.Add(30 * time.Second)},
		{name: "a shorter bound", bound: 10 * time.Second, now: func(time.Time) (*wire.Enrollment, error) { return podsEnrolled(wire.NotEnrolled), nil },
			failAt: t0.Add(10 * time.Second), firstAt: t0.Add(10 * time.Second)},
		{name: "enrolled again within the bound", now: func(at time.Time) (*wire.Enrollment, error) {
			if at.Before(t0.Add(20 * time.Second)) {
				return podsEnrolled(wire.NotEnrolled), nil
			}
			return podsEnrolled(wire.Enrolled), nil
		}, firstAt: t0.Add(30 * time.Second)},
		{name: "lost in the middle of the soak", now: func(at time.Time) (*wire.Enrollment, error) {
			if at.Before(t0.Add(2 * time.Minute)) {
				return podsEnrolled(wire.Enrolled), nil
			}
			return podsEnrolled(wire.NotEnrolled), nil
		}, failAt: t0.Add(2 * time.Minute), firstAt: t0.Add(30 * time.Second)},
		{name: "the agent does not answer", now: func(time.Time) (*wire.Enrollment, error) { return nil, errors.New("connection refused") },
			firstAt: t0.Add(30 * time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := &fixture.Clock{T: t0}
			g := &enrollGate{judgeGate: passing(), clk: clk, now: tc.now}
			r := newRig(t, g, clk, func(s *v1alpha1.NodeRolloutSpec) {
				s.Baseline = v1alpha1.DurationOf(0) // no baseline wait: only the soak moves the clock
				if tc.bound > 0 {
					s.EnrollmentTimeout = v1alpha1.DurationOf(tc.bound)
				}
			})
			r.sleepOn(clk)
			if err := r.drive(t.Context()); err != nil {
				t.Fatal(err)
			}
			if since := r.nodes.recordOf(t, v1alpha1.NodeSoak).SoakSince; !since.Equal(t0) {
				t.Fatalf("the soak began at %s, want %s (the test's times count from it)", since, t0)
			}
			checks := g.checks()
			if len(checks) == 0 || !checks[0].Equal(tc.firstAt) {
				t.Fatalf("checks at %v: want the first at %s", checks, tc.firstAt)
			}
			// Each check hands the gate the record persisted at the soak's
			// start (the fake Keeper's second), from which a successor
			// takes the enrollment before the swap back.
			g.mu.Lock()
			for _, rec := range g.records {
				if rec != "kept 2" {
					t.Errorf("a check was given the record %q, want the one persisted at the soak's start (\"kept 2\")", rec)
					break
				}
			}
			g.mu.Unlock()
			for i, at := range checks {
				if i > 0 && at.Sub(checks[i-1]) != EnrollmentPoll || !at.Before(soakEnd) {
					t.Errorf("checks at %v: want one every %s after the first, all before the soak's end %s", checks, EnrollmentPoll, soakEnd)
					break
				}
			}
			ns := r.status.node(node1)
			if tc.failAt.IsZero() {
				if ns.State != v1alpha1.NodeDone || len(g.inputs()) != 1 {
					t.Fatalf("node %s (%s), judged %d times: want Done through its gate", ns.State, ns.Reason, len(g.inputs()))
				}
				if n := len(checks); n != int(soakEnd.Sub(tc.firstAt)/EnrollmentPoll) {
					t.Errorf("%d checks, want one every %s from %s to the soak's end", n, EnrollmentPoll, tc.firstAt)
				}
				return
			}
			if last := checks[len(checks)-1]; !last.Equal(tc.failAt) {
				t.Errorf("the last check at %s, want the node failed at %s", last, tc.failAt)
			}
			if ns.State != v1alpha1.NodeFailed || len(g.inputs()) != 0 {
				t.Fatalf("node %s, judged %d times: want Failed by the watchdog, before any judgement", ns.State, len(g.inputs()))
			}
			want := "enrollment watchdog: pod shop/b was enrolled before the swap and is not now: listeners failed: nothing listens on 15008"
			when := tc.failAt.Sub(t0).String() + " after the soak began"
			if detail := strings.Join(ns.Detail, "; "); ns.Reason != "gate Fail: "+want || ns.Verdict != "Fail: "+want ||
				!strings.Contains(detail, want+"; "+when) || !strings.Contains(detail, "enrolled 1/2 on the node") {
				t.Errorf("reason %q, verdict %q, detail %q: want the headline %q, and the detail to say %q and the count", ns.Reason, ns.Verdict, detail, want, when)
			}
			if st := r.status.status(); st.Phase != v1alpha1.PhaseHalted || !strings.Contains(st.HaltReason, "pod shop/b") || r.halts(nodestep.HaltGateFailed) != 1 {
				t.Errorf("rollout %s (%q), gate_failed halts %v: want Halted naming the pod", st.Phase, st.HaltReason, r.halts(nodestep.HaltGateFailed))
			}
			if j := ns.Judgement; j == nil || j.Enrollment != "enrolled 1/2" || j.IntervalOutcome != health.Fail || len(j.EnrollmentPods) != 1 || !strings.Contains(j.EnrollmentPods[0], "shop/b") {
				t.Errorf("judgement %+v: want the count and shop/b", j)
			}
			if n := r.nodes.node(node1); n.Spec.Unschedulable {
				t.Error("the failed node was left cordoned")
			}
		})
	}
}

// TestEnrollmentWatchdogOfASuccessor: a new leader resumes a node its
// predecessor left mid-soak, before its own first status write has returned
// (its status writer knows no status yet): the watchdog still hands the gate
// the predecessor's baseline record, from the rollout as it was read, and
// fails the node on the pod enrolled before the swap.
func TestEnrollmentWatchdogOfASuccessor(t *testing.T) {
	clk := &fixture.Clock{T: t0}
	notEnrolled := func(time.Time) (*wire.Enrollment, error) { return podsEnrolled(wire.NotEnrolled), nil }
	g := &enrollGate{judgeGate: passing(), clk: clk, now: notEnrolled}
	r := newRig(t, g, clk, func(s *v1alpha1.NodeRolloutSpec) {
		s.Baseline = v1alpha1.DurationOf(0)
		s.EnrollmentTimeout = v1alpha1.DurationOf(10 * time.Second)
	})
	r.resumeAt(v1alpha1.NodeSoak, t0, func(rec *nodestep.Record) { rec.SoakSince = t0 })
	r.nr.Status.Nodes = []v1alpha1.NodeStatus{{Name: node1, State: v1alpha1.NodeSoak, StartTime: &metav1.Time{Time: t0.Add(-time.Minute)},
		Baseline: "the predecessor's record"}}
	r.status.unknown = true
	r.sleepOn(clk)
	if err := r.drive(t.Context()); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	records := append([]string(nil), g.records...)
	g.mu.Unlock()
	if len(records) == 0 || records[0] != "the predecessor's record" {
		t.Fatalf("the watchdog's checks were given the records %q, want the predecessor's first", records)
	}
	if ns := r.status.node(node1); ns.State != v1alpha1.NodeFailed || !strings.Contains(ns.Reason, "enrollment watchdog: pod shop/b was enrolled before the swap") {
		t.Fatalf("node %s (%s): want Failed by the watchdog", ns.State, ns.Reason)
	}
}
