package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// TestAbortCannotBeUndoneByRemovingIt: #27 finding 5, against the real
// kube-apiserver with the generated CRD. Once spec.abort is true, no write
// takes it back: not false, not a merge patch that removes it (a transition
// rule on the field itself does not run when the field goes), not a JSON
// patch remove. Other edits of an aborted rollout still go through, and a
// rollout never aborted may drop the field freely.
func TestAbortCannotBeUndoneByRemovingIt(t *testing.T) {
	t.Parallel()
	rolls := abortedRollout(t)
	ctx := context.Background()
	for _, p := range []struct {
		kind  types.PatchType
		patch string
	}{
		{types.MergePatchType, `{"spec":{"abort":null}}`},
		{types.MergePatchType, `{"spec":{"abort":false}}`},
		{types.JSONPatchType, `[{"op":"remove","path":"/spec/abort"}]`},
	} {
		_, err := rolls.Patch(ctx, "aborted", p.kind, []byte(p.patch), metav1.PatchOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "abort cannot be undone") {
			t.Errorf("patch %s on an aborted rollout: %v; want Invalid: abort cannot be undone", p.patch, err)
		}
	}
	assertStillAborted(t, rolls)
	if _, err := rolls.Patch(ctx, "aborted", types.MergePatchType, []byte(`{"spec":{"paused":true}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("another edit of an aborted rollout refused: %v", err)
	}
	if _, err := rolls.Create(ctx, rollout("running", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rolls.Patch(ctx, "running", types.MergePatchType, []byte(`{"spec":{"abort":null}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("removing abort from a rollout never aborted: %v", err)
	}
}

// TestInvalidRolloutLetsGoWhenDeleted: #27 finding 8. A NodeRollout whose
// spec the orchestrator cannot plan (here a target outside the Istio
// namespace) and that holds the release-nodes finalizer (restored from a
// backup, or edited invalid after it started) is deleted once nothing of it
// is in flight: the finalizer used to be removed only by a pass that plans,
// so `kubectl delete` hung for ever.
func TestInvalidRolloutLetsGoWhenDeleted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, 1)
	e.runInProcess("solo")
	nr := rollout("invalid", func(s *v1alpha1.NodeRolloutSpec) {
		s.Targets = []v1alpha1.TargetRef{{Namespace: "elsewhere", Name: "ztunnel"}}
	})
	nr.Finalizers = []string{model.FinalizerReleaseNodes}
	e.apply(nr)
	got := e.waitPhase("invalid", time.Minute, v1alpha1.PhasePending)
	if !strings.Contains(got.Status.Conditions[0].Message+got.Status.HaltReason, "elsewhere") {
		t.Logf("conditions: %+v", got.Status.Conditions)
	}
	ctx := context.Background()
	if err := e.rollouts.Delete(ctx, "invalid", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var last *v1alpha1.NodeRollout
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		nr, err := e.rollouts.Get(ctx, "invalid", metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return true, nil
		case err == nil:
			last = nr
		}
		return false, nil
	})
	if err != nil && last != nil {
		t.Fatalf("the deleted invalid rollout is still there after a minute: finalizers %v, phase %q (%v), deleted at %v", last.Finalizers, last.Status.Phase, last.Status.Conditions, last.DeletionTimestamp)
	}
	if err != nil {
		t.Fatalf("the deleted invalid rollout: %v", err)
	}
}
