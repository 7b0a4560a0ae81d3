package drain

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
)

// TestDrainNeverLeavesTheNodeAlone: under drain policy never, Drain sends
// nothing to the API and reports no drain.
func TestDrainNeverLeavesTheNodeAlone(t *testing.T) {
	h := newHarness(t, drainRecord(), standardPods()...)
	rec := drainRecord()
	got, drained, err := h.d.Drain(t.Context(), testRollout(), policy(t, v1alpha1.DrainNever, v1alpha1.PDBHalt), node, rec, now.Add(time.Minute))
	if err != nil || drained {
		t.Fatalf("Drain = drained %v, %v; want false, nil", drained, err)
	}
	if !reflect.DeepEqual(got, rec) {
		t.Errorf("record changed: %+v, want %+v", got, rec)
	}
	if a := h.kube.Actions(); len(a) != 0 {
		t.Errorf("API actions %v, want none", a)
	}
}

// TestDrainEvictsWhatADrainMoves: under policy always, the node's app pods
// are evicted through the Eviction API (policy/v1, no dry run) and the drain
// finishes once they are gone; ztunnel's DaemonSet pod, nodewise's own pod,
// the mirror pod and the pods of other nodes are left alone, and nothing is
// written to status.
func TestDrainEvictsWhatADrainMoves(t *testing.T) {
	h := newHarness(t, drainRecord(), standardPods()...)
	rec := drainRecord()
	got, drained, err := h.d.Drain(t.Context(), testRollout(), policy(t, v1alpha1.DrainAlways, v1alpha1.PDBHalt), node, rec, now.Add(time.Minute))
	if err != nil || !drained {
		t.Fatalf("Drain = drained %v, %v; want true, nil", drained, err)
	}
	if !reflect.DeepEqual(got, rec) {
		t.Errorf("record changed: %+v, want %+v", got, rec)
	}
	if got, want := h.evictions(), []string{"default/web-1", "default/web-2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("evictions %q, want %q", got, want)
	}
	for _, p := range []struct {
		ns, name string
		exists   bool
	}{
		{"default", "web-1", false}, {"default", "web-2", false}, {"default", "web-other", true},
		{"istio-system", "ztunnel-n1", true}, {ownNS, "orchestrator-0", true}, {"kube-system", "kube-proxy-n1", true},
	} {
		if got := h.podExists(t, p.ns, p.name); got != p.exists {
			t.Errorf("pod %s/%s exists = %v, want %v", p.ns, p.name, got, p.exists)
		}
	}
	if w := h.status.writes(); len(w) != 0 {
		t.Errorf("status writes %v, want none", w)
	}
}

// TestDrainEvictionAnswers: how Drain (within its timeout) takes the
// Eviction API's and the library's answers: a refusal retried through to
// success is no block, a pod already gone (404) counts as evicted, and
// anything else (Forbidden, a pod the library will not evict, a failed
// list, no Eviction API) halts the rollout as drain_failed.
func TestDrainEvictionAnswers(t *testing.T) {
	tests := []struct {
		name          string
		setup         func(h *harness)
		extraPods     []*corev1.Pod
		wantDrained   bool
		wantReason    string // drain_failed halt reason contains it ("" for no error)
		wantEvictions []string
	}{
		{
			name: "a budget refuses once, then allows",
			setup: func(h *harness) {
				var refusedOnce atomic.Bool
				h.evict = func(ev *policyv1.Eviction) error {
					if ev.Name == "web-1" && refusedOnce.CompareAndSwap(false, true) {
						return tooManyRequests()
					}
					return nil
				}
			},
			wantDrained:   true,
			wantEvictions: []string{"default/web-1", "default/web-1", "default/web-2"},
		},
		{
			name: "the pod is already gone (404)",
			setup: func(h *harness) {
				h.evict = func(ev *policyv1.Eviction) error {
					if ev.Name == "web-1" {
						return apierrors.NewNotFound(podsGR, ev.Name)
					}
					return nil
				}
			},
			wantDrained:   true,
			wantEvictions: []string{"default/web-1", "default/web-2"},
		},
		{
			name: "an eviction is forbidden",
			setup: func(h *harness) {
				h.evict = func(ev *policyv1.Eviction) error {
					if ev.Name == "web-2" {
						return apierrors.NewForbidden(podsGR, ev.Name, errors.New("denied by admission webhook"))
					}
					return nil
				}
			},
			wantReason:    "denied by admission webhook",
			wantEvictions: []string{"default/web-1", "default/web-2"},
		},
		{
			// The budget's earlier refusal is not the block: the Forbidden
			// that followed halts with its own reason (it was read as
			// pdb_blocked, and skip-node skipped the node).
			name: "a budget refuses once, then the eviction is forbidden",
			setup: func(h *harness) {
				var refusedOnce atomic.Bool
				h.evict = func(ev *policyv1.Eviction) error {
					if ev.Name != "web-1" {
						return nil
					}
					if refusedOnce.CompareAndSwap(false, true) {
						return tooManyRequests()
					}
					return apierrors.NewForbidden(podsGR, ev.Name, errors.New("denied by admission webhook"))
				}
			},
			wantReason:    "denied by admission webhook",
			wantEvictions: []string{"default/web-1", "default/web-1", "default/web-2"},
		},
		{
			name:       "a pod without a controller, which the library will not evict",
			extraPods:  []*corev1.Pod{func() *corev1.Pod { p := appPod("bare", node); p.OwnerReferences = nil; return p }()},
			wantReason: "declare no controller",
		},
		{
			name: "listing the node's pods is forbidden",
			setup: func(h *harness) {
				h.kube.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewForbidden(podsGR, "", errors.New("no list permission"))
				})
			},
			wantReason: "no list permission",
		},
		{
			name:       "the API serves no Eviction API",
			setup:      func(h *harness) { h.kube.Resources = nil },
			wantReason: `GroupVersion "v1" not found`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, drainRecord(), append(standardPods(), tt.extraPods...)...)
			if tt.setup != nil {
				tt.setup(h)
			}
			_, drained, err := h.d.Drain(t.Context(), testRollout(), policy(t, v1alpha1.DrainAlways, v1alpha1.PDBSkipNode), node, drainRecord(), now.Add(time.Minute))
			if drained != tt.wantDrained {
				t.Errorf("drained = %v, want %v (err %v)", drained, tt.wantDrained, err)
			}
			if tt.wantReason == "" {
				if err != nil {
					t.Fatalf("Drain: %v", err)
				}
			} else {
				se := stepError(t, err)
				if se.Halt != nodestep.HaltDrainFailed || se.Skip {
					t.Errorf("step error %+v, want a drain_failed halt (not a skip, whatever pdbBlocked says)", se)
				}
				if !strings.Contains(se.Reason, tt.wantReason) {
					t.Errorf("reason %q does not contain %q", se.Reason, tt.wantReason)
				}
			}
			if got := h.evictions(); !reflect.DeepEqual(got, tt.wantEvictions) {
				t.Errorf("evictions %q, want %q", got, tt.wantEvictions)
			}
		})
	}
}

// TestDrainBlockedByABudgetUntilTheTimeout: a budget that refuses an
// eviction for the whole drain timeout (here 1 s, counted from the
// deadline) follows pdbBlocked, with the refused pod and the API's message
// as the reason; the other pod was evicted meanwhile.
func TestDrainBlockedByABudgetUntilTheTimeout(t *testing.T) {
	for _, pdb := range []v1alpha1.PDBBlockedPolicy{v1alpha1.PDBHalt, v1alpha1.PDBSkipNode} {
		t.Run(string(pdb), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, drainRecord(), standardPods()...)
			h.evict = refuse("web-2")
			// The bound only keeps a broken Drain from hanging the test.
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			_, drained, err := h.d.Drain(ctx, testRollout(), policy(t, v1alpha1.DrainAlways, pdb), node, drainRecord(), now.Add(time.Second))
			if drained {
				t.Error("drained = true, want false")
			}
			se := stepError(t, err)
			if se.Halt != nodestep.HaltPDBBlocked || se.Skip != (pdb == v1alpha1.PDBSkipNode) {
				t.Errorf("step error %+v, want pdb_blocked with skip %v", se, pdb == v1alpha1.PDBSkipNode)
			}
			for _, want := range []string{"drain blocked by a PodDisruptionBudget: ", `pods/"web-2" -n "default"`, pdbMessage} {
				if !strings.Contains(se.Reason, want) {
					t.Errorf("reason %q does not contain %q", se.Reason, want)
				}
			}
			if h.podExists(t, "default", "web-1") || !h.podExists(t, "default", "web-2") {
				t.Error("want web-1 evicted and web-2 (refused) still there")
			}
		})
	}
}

// TestDrainPastTheDeadline: a successor resuming a drain whose timeout
// (counted from the step's start) has passed does not wait: a server dry
// run tells a budget's refusal (pdbBlocked decides) from a drain still
// under way (drain_failed), and the drain is done only if nothing is left
// to evict.
func TestDrainPastTheDeadline(t *testing.T) {
	tests := []struct {
		name        string
		pdb         v1alpha1.PDBBlockedPolicy
		left        time.Duration // until the deadline (default: 1 s past it)
		noAppPods   bool
		setup       func(h *harness)
		wantDrained bool
		wantHalt    string
		wantSkip    bool
		wantReason  []string
		wantDryRuns bool // the pods were asked about in a dry run, and are still there
	}{
		{
			name:        "nothing left to evict",
			noAppPods:   true,
			wantDrained: true,
		},
		{
			name: "every pod went during the dry run (404)",
			setup: func(h *harness) {
				h.evict = func(ev *policyv1.Eviction) error {
					if err := h.kube.Tracker().Delete(podsGVR, ev.Namespace, ev.Name); err != nil {
						return err
					}
					return apierrors.NewNotFound(podsGR, ev.Name)
				}
			},
			wantDrained: true,
		},
		{
			name:        "pods left and no budget refuses: the timeout passed",
			setup:       func(h *harness) { h.keep = true },
			wantHalt:    nodestep.HaltDrainFailed,
			wantReason:  []string{"the drain timeout 5m0s (counted from the Drain step's start) passed"},
			wantDryRuns: true,
		},
		{
			name:        "a budget refuses, pdbBlocked halt",
			pdb:         v1alpha1.PDBHalt,
			setup:       func(h *harness) { h.evict = refuse("web-2") },
			wantHalt:    nodestep.HaltPDBBlocked,
			wantReason:  []string{"drain blocked by a PodDisruptionBudget: ", `pods/"web-2" -n "default"`, pdbMessage},
			wantDryRuns: true,
		},
		{
			name:        "less than a second left counts as past",
			left:        500 * time.Millisecond,
			setup:       func(h *harness) { h.evict = refuse("web-2") },
			wantHalt:    nodestep.HaltPDBBlocked,
			wantReason:  []string{`pods/"web-2" -n "default"`, pdbMessage},
			wantDryRuns: true,
		},
		{
			name:        "a budget refuses, pdbBlocked skip-node",
			pdb:         v1alpha1.PDBSkipNode,
			setup:       func(h *harness) { h.evict = refuse("web-2") },
			wantHalt:    nodestep.HaltPDBBlocked,
			wantSkip:    true,
			wantReason:  []string{`pods/"web-2" -n "default"`},
			wantDryRuns: true,
		},
		{
			name: "a dry-run eviction is forbidden",
			pdb:  v1alpha1.PDBSkipNode,
			setup: func(h *harness) {
				h.evict = func(ev *policyv1.Eviction) error {
					if ev.Name == "web-1" {
						return apierrors.NewForbidden(podsGR, ev.Name, errors.New("dry run denied"))
					}
					return nil
				}
			},
			wantHalt:   nodestep.HaltDrainFailed,
			wantReason: []string{"dry-run eviction of pod default/web-1", "dry run denied"},
		},
		{
			name: "listing the pods to evict fails",
			setup: func(h *harness) {
				h.kube.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewForbidden(podsGR, "", errors.New("no list permission"))
				})
			},
			wantHalt:   nodestep.HaltDrainFailed,
			wantReason: []string{"listing the pods to evict from node n1", "no list permission"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pods := standardPods()
			if tt.noAppPods {
				pods = pods[2:]
			}
			h := newHarness(t, drainRecord(), pods...)
			if tt.setup != nil {
				tt.setup(h)
			}
			pdb := tt.pdb
			if pdb == "" {
				pdb = v1alpha1.PDBHalt
			}
			// Past the deadline nothing waits: a Drain still running when
			// this bound ends fails the test (the context's error is no
			// step error).
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			left := tt.left
			if left == 0 {
				left = -time.Second
			}
			_, drained, err := h.d.Drain(ctx, testRollout(), policy(t, v1alpha1.DrainAlways, pdb), node, drainRecord(), now.Add(left))
			if drained != tt.wantDrained {
				t.Errorf("drained = %v, want %v (err %v)", drained, tt.wantDrained, err)
			}
			if tt.wantHalt == "" {
				if err != nil {
					t.Fatalf("Drain: %v", err)
				}
			} else {
				se := stepError(t, err)
				if se.Halt != tt.wantHalt || se.Skip != tt.wantSkip {
					t.Errorf("step error %+v, want halt %s skip %v", se, tt.wantHalt, tt.wantSkip)
				}
				for _, want := range tt.wantReason {
					if !strings.Contains(se.Reason, want) {
						t.Errorf("reason %q does not contain %q", se.Reason, want)
					}
				}
			}
			if tt.wantDryRuns {
				ev := h.evictions()
				for _, want := range []string{"default/web-1 (dry run)", "default/web-2 (dry run)"} {
					if !slices.Contains(ev, want) {
						t.Errorf("evictions %q lack %q", ev, want)
					}
				}
				if !h.podExists(t, "default", "web-1") || !h.podExists(t, "default", "web-2") {
					t.Error("a pod was evicted, want both still there")
				}
			}
			if tt.wantHalt == nodestep.HaltPDBBlocked {
				for _, e := range h.evictions() {
					if !strings.HasSuffix(e, "(dry run)") {
						t.Errorf("eviction %q sent past the deadline, want dry runs only", e)
					}
				}
			}
			if w := h.status.writes(); len(w) != 0 {
				t.Errorf("status writes %v, want none", w)
			}
		})
	}
}

// TestDrainWaitsOnABudget: under pdbBlocked wait, a refusal is recorded in
// the node's status entry and the drain tries again (with a fresh timeout),
// finishing once the budget allows.
func TestDrainWaitsOnABudget(t *testing.T) {
	h := newHarness(t, drainRecord(), standardPods()...)
	var refusals atomic.Int32
	h.evict = func(ev *policyv1.Eviction) error {
		if ev.Name == "web-1" && refusals.Add(1) == 1 {
			return tooManyRequests()
		}
		return nil
	}
	// Past the deadline: the first attempt is the dry run, which the budget refuses.
	_, drained, err := h.d.Drain(t.Context(), testRollout(), policy(t, v1alpha1.DrainAlways, v1alpha1.PDBWait), node, drainRecord(), now.Add(-time.Second))
	if err != nil || !drained {
		t.Fatalf("Drain = drained %v, %v; want true, nil", drained, err)
	}
	if w := h.status.writes(); !reflect.DeepEqual(w, []string{"r"}) {
		t.Errorf("status writes %v, want one of r", w)
	}
	want := `waiting (attempt 1): drain blocked by a PodDisruptionBudget: pods/"web-1" -n "default": ` + pdbMessage
	if got := h.status.reason(); got != want {
		t.Errorf("status reason %q, want %q", got, want)
	}
	if h.podExists(t, "default", "web-1") || h.podExists(t, "default", "web-2") {
		t.Error("want both pods evicted by the second attempt")
	}
}

// TestDrainWaitCannotRecordWhy: under pdbBlocked wait, a failed status
// write ends the drain with that error, or with the context's cause when
// the context ended meanwhile; neither is a step error.
func TestDrainWaitCannotRecordWhy(t *testing.T) {
	errStop := errors.New("leader lost")
	tests := []struct {
		name  string
		fail  func(cancel context.CancelCauseFunc) error
		check func(err error) bool
	}{
		{
			name: "status write forbidden",
			fail: func(context.CancelCauseFunc) error {
				return apierrors.NewForbidden(podsGR, "r", errors.New("no status permission"))
			},
			check: apierrors.IsForbidden,
		},
		{
			name:  "the context ends during the status write",
			fail:  func(cancel context.CancelCauseFunc) error { cancel(errStop); return context.Canceled },
			check: func(err error) bool { return errors.Is(err, errStop) },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, drainRecord(), standardPods()...)
			h.evict = refuse("web-1")
			// The bound only keeps a broken Drain from hanging the test.
			bounded, stop := context.WithTimeout(t.Context(), 10*time.Second)
			defer stop()
			ctx, cancel := context.WithCancelCause(bounded)
			defer cancel(nil)
			h.status.fail = func() error { return tt.fail(cancel) }
			_, drained, err := h.d.Drain(ctx, testRollout(), policy(t, v1alpha1.DrainAlways, v1alpha1.PDBWait), node, drainRecord(), now.Add(-time.Second))
			if drained || !tt.check(err) {
				t.Fatalf("Drain = drained %v, %v; want false and the expected error", drained, err)
			}
			var se *nodestep.StepError
			if errors.As(err, &se) {
				t.Errorf("got step error %+v, want the write's error", se)
			}
		})
	}
}

// TestDrainStopsWhenTheContextEnds: a drain held by a budget ends with the
// context's cause when the context ends, not with a step error.
func TestDrainStopsWhenTheContextEnds(t *testing.T) {
	errStop := errors.New("leader lost")
	h := newHarness(t, drainRecord(), standardPods()...)
	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	h.evict = func(ev *policyv1.Eviction) error {
		if ev.Name == "web-1" {
			cancel(errStop)
			return tooManyRequests()
		}
		return nil
	}
	_, drained, err := h.d.Drain(ctx, testRollout(), policy(t, v1alpha1.DrainAlways, v1alpha1.PDBWait), node, drainRecord(), now.Add(time.Minute))
	if drained || !errors.Is(err, errStop) {
		t.Fatalf("Drain = drained %v, %v; want false, %v", drained, err, errStop)
	}
	if w := h.status.writes(); len(w) != 0 {
		t.Errorf("status writes %v, want none", w)
	}
}

// TestDrainStopsWhenTheNodeLeaves: a drain held by a budget (under wait,
// possibly forever) stops once the caches say the node leaves the rollout
// (here an abort seen after it began), with errLeftDuringDrain naming why.
func TestDrainStopsWhenTheNodeLeaves(t *testing.T) {
	h := newHarness(t, drainRecord(), standardPods()...)
	var refusals atomic.Int32
	h.evict = func(ev *policyv1.Eviction) error {
		if ev.Name != "web-1" {
			return nil
		}
		if refusals.Add(1) == 2 {
			h.leaving.Store(nodestep.LeaveAbort)
		}
		return tooManyRequests()
	}
	// The bound only keeps a broken Drain from hanging the test.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, drained, err := h.d.Drain(ctx, testRollout(), policy(t, v1alpha1.DrainAlways, v1alpha1.PDBWait), node, drainRecord(), now.Add(time.Minute))
	if drained || !errors.Is(err, errLeftDuringDrain) {
		t.Fatalf("Drain = drained %v, %v; want false, %v", drained, err, errLeftDuringDrain)
	}
	if !strings.Contains(err.Error(), "("+string(nodestep.LeaveAbort)+")") {
		t.Errorf("error %q does not say why (%s)", err, nodestep.LeaveAbort)
	}
}

// TestOnlyTimedOut: the drain library's errors that mean time ran out (a
// refusal to the end, a pod still terminating) against any other failure.
func TestOnlyTimedOut(t *testing.T) {
	refused := errors.New(`error when evicting pods/"web-1" -n "default": global timeout reached: 1s`)
	terminating := fmt.Errorf(`error when waiting for pod "web-2" in namespace "default" to terminate: %v`, context.DeadlineExceeded)
	forbidden := errors.New(`error when evicting pods/"web-3" -n "default": denied by admission webhook`)
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"one refusal", utilerrors.NewAggregate([]error{refused}), true},
		{"a refusal and a pod still terminating", utilerrors.NewAggregate([]error{refused, terminating}), true},
		{"a refusal and a forbidden eviction", utilerrors.NewAggregate([]error{refused, forbidden}), false},
		{"not an aggregate", refused, true},
		{"a forbidden eviction alone", forbidden, false},
	} {
		if got := onlyTimedOut(c.err); got != c.want {
			t.Errorf("%s: onlyTimedOut = %v, want %v", c.name, got, c.want)
		}
	}
}
