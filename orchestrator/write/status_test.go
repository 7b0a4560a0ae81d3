package write

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
)

var rolloutsGR = schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "noderollouts"}

// TestStatusMutate: Mutate returns once a write holding its mutation
// succeeded, with the counts recomputed; the API's answer is remembered, so
// the next write needs no read, a mutation that changes nothing is not
// written, and Forget makes the next write read again.
func TestStatusMutate(t *testing.T) {
	api := fixture.NewRollouts(testRollout("r"))
	w := NewStatus(t.Context(), api, zap.NewNop())
	if _, ok := w.Current("r", ""); ok {
		t.Fatalf("Current before any write: ok")
	}
	if err := w.Mutate(t.Context(), "r", setNode("a", v1alpha1.NodeDone)); err != nil {
		t.Fatalf("Mutate: %v", err)
	}
	if err := w.Mutate(t.Context(), "r", setNode("b", v1alpha1.NodePending)); err != nil {
		t.Fatalf("Mutate: %v", err)
	}
	if err := w.Mutate(t.Context(), "r", setNode("b", v1alpha1.NodePending)); err != nil { // no change
		t.Fatalf("Mutate: %v", err)
	}
	w.Wait()
	if got := strings.Join(api.Calls, ","); got != "get r,updatestatus r,updatestatus r" {
		t.Errorf("calls = %s; want one read, two writes (none for the unchanged status)", got)
	}
	st := api.Stored("r").Status
	if nodeStates(st) != "a=Done,b=Pending" || st.Counts.Total != 2 || st.Counts.Done != 1 || st.Counts.Pending != 1 {
		t.Errorf("stored status = %s %+v; want a Done, b Pending, counted", nodeStates(st), st.Counts)
	}
	cur, ok := w.Current("r", "r-uid")
	if !ok || nodeStates(cur) != "a=Done,b=Pending" {
		t.Errorf("Current = %s, %v; want the written status", nodeStates(cur), ok)
	}
	if _, ok := w.Current("r", "other-uid"); ok {
		t.Errorf("Current of another object with the same name: ok")
	}
	w.Forget("r")
	if _, ok := w.Current("r", ""); ok {
		t.Errorf("Current after Forget: ok")
	}
	if err := w.Mutate(t.Context(), "r", setNode("c", v1alpha1.NodeDone)); err != nil {
		t.Fatalf("Mutate: %v", err)
	}
	w.Wait()
	if n := countCalls(api, "get r"); n != 2 {
		t.Errorf("%d reads; want a second one after Forget", n)
	}
}

// TestStatusGroupCommit: mutations queued while a write is in flight, for
// whom nobody waits and for whom somebody does, go out together in the
// next write.
func TestStatusGroupCommit(t *testing.T) {
	api := fixture.NewRollouts(testRollout("r"))
	w := NewStatus(t.Context(), api, zap.NewNop())
	entered, release := blockFirst(api, "updatestatus", nil)
	first := make(chan error, 1)
	go func() { first <- w.Mutate(t.Context(), "r", setNode("a", v1alpha1.NodeDone)) }()
	<-entered // the first write is in flight
	w.MutateLater("r", setNode("b", v1alpha1.NodeDone))
	w.MutateLater("r", setNode("c", v1alpha1.NodePending))
	second := make(chan error, 1)
	go func() { second <- w.Mutate(t.Context(), "r", setNode("d", v1alpha1.NodeFailed)) }()
	waitQueued(w, 3)
	release()
	if err := <-first; err != nil {
		t.Fatalf("first Mutate: %v", err)
	}
	if err := <-second; err != nil {
		t.Fatalf("second Mutate: %v", err)
	}
	w.Wait()
	if n := countCalls(api, "updatestatus r"); n != 2 {
		t.Errorf("%d writes; want 2 (the first, then b, c and d together): %v", n, api.Calls)
	}
	st := api.Stored("r").Status
	if nodeStates(st) != "a=Done,b=Done,c=Pending,d=Failed" || st.Counts.Failed != 1 || st.Counts.Done != 2 {
		t.Errorf("stored status = %s %+v", nodeStates(st), st.Counts)
	}
}

// TestStatusCurrentIncludesQueued: Current is the last written status with
// every mutation in flight or queued applied, before they are written.
func TestStatusCurrentIncludesQueued(t *testing.T) {
	api := fixture.NewRollouts(testRollout("r"), testRollout("other"))
	w := NewStatus(t.Context(), api, zap.NewNop())
	if err := w.Mutate(t.Context(), "r", setNode("a", v1alpha1.NodeDone)); err != nil {
		t.Fatal(err)
	}
	entered, release := blockFirst(api, "updatestatus", nil)
	inFlight := make(chan error, 1)
	go func() { inFlight <- w.Mutate(t.Context(), "r", setNode("b", v1alpha1.NodeFailed)) }()
	<-entered
	w.MutateLater("r", setNode("c", v1alpha1.NodePending))
	w.MutateLater("other", setNode("x", v1alpha1.NodeDone)) // another rollout's: not in r's status
	cur, ok := w.Current("r", "r-uid")
	if !ok || nodeStates(cur) != "a=Done,b=Failed,c=Pending" || cur.Counts.Total != 3 || cur.Counts.Failed != 1 {
		t.Errorf("Current = %s %+v, %v; want a written, b in flight and c queued, counted", nodeStates(cur), cur.Counts, ok)
	}
	release()
	if err := <-inFlight; err != nil {
		t.Fatal(err)
	}
	w.Wait()
	if got := nodeStates(api.Stored("r").Status); got != "a=Done,b=Failed,c=Pending" {
		t.Errorf("stored status = %s", got)
	}
	if got := nodeStates(api.Stored("other").Status); got != "x=Done" {
		t.Errorf("other's stored status = %s", got)
	}
}

// TestStatusPacesWritesBehind: writes behind wait for the pacing delay and
// go out together with the next write somebody waits for; alone, they go
// out when the delay runs out.
func TestStatusPacesWritesBehind(t *testing.T) {
	api := fixture.NewRollouts(testRollout("r"))
	w := NewStatus(t.Context(), api, zap.NewNop())
	w.MutateLater("r", setNode("a", v1alpha1.NodeDone)) // nothing written yet: at once
	w.Wait()
	if got := nodeStates(api.Stored("r").Status); got != "a=Done" {
		t.Fatalf("stored status = %s; want the write behind", got)
	}
	w.MutateLater("r", setNode("b", v1alpha1.NodeDone)) // right after a write: after statusEvery
	w.Wait()
	if got := nodeStates(api.Stored("r").Status); got != "a=Done,b=Done" {
		t.Fatalf("stored status = %s; want the paced write behind", got)
	}
	pinPacing(w)
	w.MutateLater("r", setNode("c", v1alpha1.NodeDone))
	w.MutateLater("r", setNode("d", v1alpha1.NodeDone))
	if err := w.Mutate(t.Context(), "r", setNode("e", v1alpha1.NodeFailed)); err != nil {
		t.Fatal(err)
	}
	w.Wait()
	if n := countCalls(api, "updatestatus r"); n != 3 {
		t.Errorf("%d writes; want 3 (c, d and e in one)", n)
	}
	if got := nodeStates(api.Stored("r").Status); got != "a=Done,b=Done,c=Done,d=Done,e=Failed" {
		t.Errorf("stored status = %s", got)
	}
}

// TestStatusConflict: a user's write since the status this process last
// wrote makes its write 409; the writer re-reads, re-applies the mutation
// and keeps the user's change.
func TestStatusConflict(t *testing.T) {
	fastConflicts(t)
	api := fixture.NewRollouts(testRollout("r"))
	w := NewStatus(t.Context(), api, zap.NewNop())
	if err := w.Mutate(t.Context(), "r", setNode("a", v1alpha1.NodeDone)); err != nil {
		t.Fatal(err)
	}
	edited := api.Stored("r")
	edited.Labels = map[string]string{"team": "mesh"}
	api.Put(edited) // a user's edit: a new resourceVersion
	if err := w.Mutate(t.Context(), "r", setNode("b", v1alpha1.NodeDone)); err != nil {
		t.Fatalf("Mutate: %v", err)
	}
	w.Wait()
	if got := strings.Join(api.Calls, ","); got != "get r,updatestatus r,updatestatus r,get r,updatestatus r" {
		t.Errorf("calls = %s; want the 409 followed by a read and a write", got)
	}
	got := api.Stored("r")
	if nodeStates(got.Status) != "a=Done,b=Done" || got.Labels["team"] != "mesh" {
		t.Errorf("stored = %s %v; want both nodes and the user's label", nodeStates(got.Status), got.Labels)
	}
}

// TestStatusMutateErrors: a write somebody waits for returns the API's
// error, wrapped, and is not retried.
func TestStatusMutateErrors(t *testing.T) {
	fastConflicts(t)
	for _, tc := range []struct {
		name       string
		fail       func(verb, name string) error
		missing    bool
		wantErr    func(error) bool
		wantMsg    string
		wantWrites int
	}{
		{
			name:    "forbidden",
			fail:    failVerb("updatestatus", apierrors.NewForbidden(rolloutsGR, "r", errors.New("rbac"))),
			wantErr: apierrors.IsForbidden, wantMsg: "writing NodeRollout r status", wantWrites: 1,
		},
		{
			name:    "conflicting every time",
			fail:    failVerb("updatestatus", apierrors.NewConflict(rolloutsGR, "r", errors.New("modified"))),
			wantErr: apierrors.IsConflict, wantMsg: `"r"`, wantWrites: 4, // ConflictBackoff.Steps
		},
		{name: "rollout deleted", missing: true, wantErr: apierrors.IsNotFound, wantMsg: "reading NodeRollout r"},
		{
			name:    "read refused",
			fail:    failVerb("get", apierrors.NewServiceUnavailable("etcd")),
			wantErr: apierrors.IsServiceUnavailable, wantMsg: "reading NodeRollout r",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := fixture.NewRollouts()
			if !tc.missing {
				api.Put(testRollout("r"))
			}
			api.Fail = tc.fail
			w := NewStatus(t.Context(), api, zap.NewNop())
			err := w.Mutate(t.Context(), "r", setNode("a", v1alpha1.NodeDone))
			if !tc.wantErr(err) || !strings.Contains(err.Error(), tc.wantMsg) {
				t.Fatalf("err = %v; want the API's error, with %q", err, tc.wantMsg)
			}
			w.Wait()
			if n := countCalls(api, "updatestatus r"); n != tc.wantWrites {
				t.Errorf("%d writes; want %d (%v)", n, tc.wantWrites, api.Calls)
			}
			if !tc.missing && len(api.Stored("r").Status.Nodes) != 0 {
				t.Errorf("status written: %s", nodeStates(api.Stored("r").Status))
			}
		})
	}
}

// failVerb is a fixture.Rollouts.Fail answering err to every call of verb.
func failVerb(verb string, err error) func(string, string) error {
	return func(v, _ string) error {
		if v == verb {
			return err
		}
		return nil
	}
}

// TestStatusWriteBehindRetries: a failed write is retried for its writes
// behind (their node steps are already persisted) but not for the caller
// that waited for it and got the error.
func TestStatusWriteBehindRetries(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	api := fixture.NewRollouts(testRollout("r"))
	w := NewStatus(t.Context(), api, zap.New(core))
	failed := false
	api.Fail = func(verb, _ string) error {
		if verb == "updatestatus" && !failed {
			failed = true
			return apierrors.NewInternalError(errors.New("etcd timeout"))
		}
		return nil
	}
	pinPacing(w)
	w.MutateLater("r", setNode("behind", v1alpha1.NodeDone))
	if err := w.Mutate(t.Context(), "r", setNode("waited", v1alpha1.NodeFailed)); !apierrors.IsInternalError(err) {
		t.Fatalf("Mutate = %v; want the internal error", err)
	}
	w.Wait()
	if n := countCalls(api, "updatestatus r"); n != 2 {
		t.Errorf("%d writes; want the failed one and its retry", n)
	}
	if got := nodeStates(api.Stored("r").Status); got != "behind=Done" {
		t.Errorf("stored status = %s; want only the write behind", got)
	}
	if logs.FilterMessage("writing NodeRollout status; retrying").Len() != 1 {
		t.Errorf("logs = %v; want one retry warning", logs.All())
	}
}

// TestStatusDeletedRollout: writes behind for a rollout that is gone are
// dropped, not retried, and its remembered status is forgotten; the other
// rollouts of the same batch are written.
func TestStatusDeletedRollout(t *testing.T) {
	api := fixture.NewRollouts(testRollout("r"), testRollout("gone"))
	w := NewStatus(t.Context(), api, zap.NewNop())
	if err := w.Mutate(t.Context(), "gone", setNode("a", v1alpha1.NodeDone)); err != nil {
		t.Fatal(err)
	}
	if _, ok := w.Current("gone", ""); !ok {
		t.Fatalf("Current after a write: not ok")
	}
	if err := api.Delete(t.Context(), "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	pinPacing(w)
	w.MutateLater("gone", setNode("b", v1alpha1.NodeDone))
	w.MutateLater("never", setNode("b", v1alpha1.NodeDone))
	if err := w.Mutate(t.Context(), "r", setNode("c", v1alpha1.NodeDone)); err != nil {
		t.Fatal(err)
	}
	w.Wait()
	if n := countCalls(api, "updatestatus gone"); n != 2 {
		t.Errorf("%d writes of gone; want the first and one 404, no retry", n)
	}
	if n := countCalls(api, "get never"); n != 1 {
		t.Errorf("%d reads of never; want one 404, no retry", n)
	}
	if _, ok := w.Current("gone", ""); ok {
		t.Errorf("Current of a deleted rollout: ok")
	}
	if got := nodeStates(api.Stored("r").Status); got != "c=Done" {
		t.Errorf("r's status = %s; want written beside the 404s", got)
	}
}

// TestStatusMutateContextEnds: a caller whose context ends stops waiting
// with the context's error, but its mutation is still written (the writer
// runs on the leader's context, not the caller's).
func TestStatusMutateContextEnds(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  func(t *testing.T) context.Context
		want error
	}{
		{
			name: "cancelled",
			ctx: func(t *testing.T) context.Context {
				ctx, cancel := context.WithCancel(t.Context())
				cancel()
				return ctx
			},
			want: context.Canceled,
		},
		{
			name: "deadline passed",
			ctx: func(t *testing.T) context.Context {
				ctx, cancel := context.WithDeadline(t.Context(), time.Unix(0, 0))
				t.Cleanup(cancel)
				return ctx
			},
			want: context.DeadlineExceeded,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := fixture.NewRollouts(testRollout("r"))
			w := NewStatus(t.Context(), api, zap.NewNop())
			_, release := blockFirst(api, "updatestatus", nil) // the write cannot finish before Mutate returns
			if err := w.Mutate(tc.ctx(t), "r", setNode("a", v1alpha1.NodeDone)); !errors.Is(err, tc.want) {
				t.Fatalf("Mutate = %v; want %v", err, tc.want)
			}
			release()
			w.Wait()
			if got := nodeStates(api.Stored("r").Status); got != "a=Done" {
				t.Errorf("stored status = %s; want the mutation written all the same", got)
			}
		})
	}
}

// TestStatusLifeEnds: once the leader's context ends, a failed write behind
// is not retried and the writer goroutine ends (Wait returns), whether the
// context ended before the failure was seen or while the writer waited to
// retry.
func TestStatusLifeEnds(t *testing.T) {
	for _, tc := range []struct {
		name string
		// endOnFail: life ends inside the failing request; else when the
		// writer logs that it will retry (then it is waiting to).
		endOnFail bool
	}{
		{name: "during the failing write", endOnFail: true},
		{name: "while waiting to retry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			life, end := context.WithCancel(t.Context())
			defer end()
			api := fixture.NewRollouts(testRollout("r"))
			api.Fail = func(verb, _ string) error {
				if verb != "updatestatus" {
					return nil
				}
				if tc.endOnFail {
					end()
				}
				return apierrors.NewInternalError(errors.New("etcd timeout"))
			}
			core, logs := observer.New(zap.WarnLevel)
			log := zap.New(core, zap.Hooks(func(e zapcore.Entry) error {
				if !tc.endOnFail {
					end()
				}
				return nil
			}))
			w := NewStatus(life, api, log)
			w.MutateLater("r", setNode("a", v1alpha1.NodeDone))
			w.Wait()
			if n := countCalls(api, "updatestatus r"); n != 1 {
				t.Errorf("%d writes; want no retry once life ended", n)
			}
			if got, want := logs.Len(), map[bool]int{true: 0, false: 1}[tc.endOnFail]; got != want {
				t.Errorf("%d retry warnings; want %d", got, want)
			}
			w.mu.Lock()
			active := w.active
			w.mu.Unlock()
			if active {
				t.Errorf("the writer ended but is still marked active: no later write would start one")
			}
		})
	}
}

// TestStatusWriteFollowsPhase: a mutation that sets the phase alone (a node
// worker's halt) is written with the Ready, Reconciling and Stalled
// conditions of that phase, the halt reason the message; one that leaves
// the phase alone leaves them as the pass set them.
func TestStatusWriteFollowsPhase(t *testing.T) {
	nr := testRollout("r")
	nr.Generation = 2
	nr.Status.Phase, nr.Status.ObservedGeneration = v1alpha1.PhaseProgressing, 2
	v1alpha1.SetProgress(&nr.Status.Conditions, v1alpha1.ProgressReconciling, "Progressing", "wave 1", 2, metav1.Now())
	api := fixture.NewRollouts(nr)
	w := NewStatus(t.Context(), api, zap.NewNop())
	if err := w.Mutate(t.Context(), "r", setNode("a", v1alpha1.NodeSoak)); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(api.Stored("r").Status.Conditions, v1alpha1.ConditionReconciling); c == nil || c.Status != metav1.ConditionTrue || c.Message != "wave 1" {
		t.Errorf("after a node step: Reconciling %+v, want True, \"wave 1\" as the pass set it", c)
	}
	halt := func(s *v1alpha1.NodeRolloutStatus) {
		model.NodeEntry(s, "a").State = v1alpha1.NodeFailed
		s.Phase, s.HaltReason = v1alpha1.PhaseHalted, "Halted at a: resets 0/s → 3/s"
	}
	if err := w.Mutate(t.Context(), "r", halt); err != nil {
		t.Fatal(err)
	}
	w.Wait()
	st := api.Stored("r").Status
	for typ, want := range map[string]metav1.ConditionStatus{v1alpha1.ConditionStalled: metav1.ConditionTrue, v1alpha1.ConditionReconciling: metav1.ConditionFalse, v1alpha1.ConditionReady: metav1.ConditionFalse} {
		if c := meta.FindStatusCondition(st.Conditions, typ); c == nil || c.Status != want || c.Reason != "Halted" || c.ObservedGeneration != 2 {
			t.Errorf("after a halt: %s %+v, want %s, reason Halted, generation 2", typ, c, want)
		}
	}
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionStalled); c == nil || c.Message != st.HaltReason {
		t.Errorf("after a halt: Stalled %+v, want the halt reason as its message", c)
	}
}
