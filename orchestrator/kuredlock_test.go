package orchestrator

import (
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodewise/nodewise/orchestrator/kuredlock"
	"github.com/nodewise/nodewise/orchestrator/locks"
	"github.com/nodewise/nodewise/orchestrator/model"
)

func kuredDS(ns, lock string) *appsv1.DaemonSet {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kured"}}
	if lock != "" {
		ds.Annotations = map[string]string{locks.AnnotationKured: lock}
	}
	return ds
}

func (e *env) kuredLockOnAPI() (string, bool) {
	e.t.Helper()
	ds, err := e.kube.AppsV1().DaemonSets("kube-system").Get(e.ctx, "kured", metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	v, ok := ds.Annotations[locks.AnnotationKured]
	return v, ok
}

// TestGoneRolloutsKuredLockIsReleased: a leader releases the entries of a
// rollout that no longer exists (deleted after a crash, before its leader
// let go), keeps a live rollout's and Kured's own.
func TestGoneRolloutsKuredLockIsReleased(t *testing.T) {
	single := `{"nodeID":"nodewise:gone","metadata":{"unschedulable":false,"nodes":["node-1"]},"created":"2026-11-30T09:59:00Z","TTL":600000000000}`
	e := newEnv(t, kuredDS("kube-system", single))
	e.ex.apply.kured.ReleaseGone(e.ctx, map[string]bool{"gone": true})
	if _, ok := e.kuredLockOnAPI(); !ok {
		t.Fatal("a live rollout's lock was released")
	}
	e.ex.apply.kured.ReleaseGone(e.ctx, map[string]bool{"other": true})
	if v, ok := e.kuredLockOnAPI(); ok {
		t.Errorf("a gone rollout's lock is still held: %s", v)
	}

	multi := `{"maxOwners":3,"locks":[{"nodeID":"node-7","metadata":{"unschedulable":false},"created":"2026-11-30T09:59:00Z","TTL":0},` +
		`{"nodeID":"nodewise:gone","metadata":{"unschedulable":false},"created":"2026-11-30T09:59:00Z","TTL":600000000000},` +
		`{"nodeID":"nodewise:gone#2","metadata":{"unschedulable":false},"created":"2026-11-30T09:59:00Z","TTL":600000000000}]}`
	e = newEnv(t, kuredDS("kube-system", multi))
	e.ex.apply.kured.ReleaseGone(e.ctx, nil)
	v, _ := e.kuredLockOnAPI()
	if strings.Contains(v, "nodewise") || !strings.Contains(v, `"nodeID":"node-7"`) || !strings.Contains(v, `"maxOwners":3`) {
		t.Errorf("multi-lock after the release: %s, want Kured's node-7 only", v)
	}
}

// TestKuredLockOnAnotherDaemonSetHoldsStarts: Kured's lock on a DaemonSet
// other than --kured-daemonset cannot be taken (the RBAC names only that
// one): a start fails closed, saying which flag to set; a release (no node
// in flight) is no error.
func TestKuredLockOnAnotherDaemonSetHoldsStarts(t *testing.T) {
	e := newEnv(t, kuredDS("ops", `{"nodeID":"node-3","created":"2026-11-30T09:59:00Z","TTL":0}`))
	_, err := e.ex.apply.kured.Sync(e.ctx, locks.KuredHolder("r"), []string{"node-1"})
	if err == nil || !strings.Contains(err.Error(), "ops/kured") || !strings.Contains(err.Error(), "--kured-daemonset") {
		t.Errorf("start beside a lock on ops/kured: %v, want an error naming it and --kured-daemonset", err)
	}
	if _, err := e.ex.apply.kured.Sync(e.ctx, locks.KuredHolder("r"), nil); err != nil {
		t.Errorf("release: %v", err)
	}
	if _, err := newEnv(t).ex.apply.kured.Sync(e.ctx, locks.KuredHolder("r"), []string{"node-1"}); err != nil {
		t.Errorf("no Kured at all: %v, want nothing to hold", err)
	}
}

// TestKuredLockConflictNeverClobbersKured: Kured acquires its lock between
// nodewise's read and its update. The update is a conflict; nodewise reads
// again, finds Kured's lock and leaves it (the node waits), never writing
// over it. Without Kured's write, the retry takes the free lock.
func TestKuredLockConflictNeverClobbersKured(t *testing.T) {
	kuredLock := `{"nodeID":"node-3","metadata":{"unschedulable":false},"created":"2026-11-30T09:59:59Z","TTL":0}`
	for _, kuredWrites := range []bool{true, false} {
		e := newEnv(t, kuredDS("kube-system", ""))
		// The API server's clock (the fake stamps the real time; the test's
		// clock reads t0) measured as an earlier write would have: else the
		// take is written again by the measured clock, a write this test
		// does not count.
		stamp := metav1.NewTime(time.Now().Truncate(time.Second))
		e.ex.kuredClock.Observe(&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{ManagedFields: []metav1.ManagedFieldsEntry{
			{Manager: model.FieldManager, Operation: metav1.ManagedFieldsOperationUpdate, Time: &stamp},
		}}}, model.FieldManager, t0, t0)
		updates := 0
		e.kube.PrependReactor("update", "daemonsets", func(a k8stesting.Action) (bool, runtime.Object, error) {
			updates++
			if updates > 1 {
				return false, nil, nil
			}
			if kuredWrites { // Kured's Acquire lands first
				ds := kuredDS("kube-system", kuredLock)
				if err := e.kube.Tracker().Update(appsv1.SchemeGroupVersion.WithResource("daemonsets"), ds, "kube-system"); err != nil {
					t.Fatal(err)
				}
			}
			return true, nil, apierrors.NewConflict(appsv1.Resource("daemonsets"), "kured", errors.New("the object has been modified"))
		})
		w, err := e.ex.apply.kured.Sync(e.ctx, locks.KuredHolder("r"), []string{"node-1"})
		v, _ := e.kuredLockOnAPI()
		switch {
		case kuredWrites && (!errors.Is(err, locks.ErrKuredHolds) || v != kuredLock):
			t.Errorf("Kured acquired during nodewise's update: err %v, lock %s; want ErrKuredHolds and Kured's lock untouched", err, v)
		case !kuredWrites && (err != nil || !strings.Contains(v, `"nodeID":"nodewise:r"`)):
			t.Errorf("a conflict with no Kured write: err %v, lock %s; want nodewise's lock after the retry", err, v)
		}
		if want := map[bool]kuredlock.Write{true: kuredlock.Unchanged, false: kuredlock.Taken}[kuredWrites]; w != want {
			t.Errorf("kuredWrites %v: wrote %d, want %d", kuredWrites, w, want)
		}
		if updates != 1+map[bool]int{true: 0, false: 1}[kuredWrites] {
			t.Errorf("kuredWrites %v: %d updates", kuredWrites, updates)
		}
	}
}
