package write

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// A NodeRollout that has started a node carries FinalizerReleaseNodes, so
// deleting it is an abort first (fleet.Pass.HoldsNodes).

// SetFinalizer adds (on) or removes FinalizerReleaseNodes, from a fresh read
// and conditional on its resourceVersion (the cache's copy is behind every
// status write), keeping every other finalizer. A conflict is an error: the
// next pass tries again.
func SetFinalizer(ctx context.Context, rollouts v1alpha1.NodeRolloutInterface, recorder record.EventRecorder, nr *v1alpha1.NodeRollout, on bool) error {
	fresh, err := rollouts.Get(ctx, nr.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading NodeRollout %s for its finalizer: %w", nr.Name, err)
	}
	if fresh.UID != nr.UID {
		return nil // replaced meanwhile: the next pass sees the new one
	}
	has := slices.Contains(fresh.Finalizers, model.FinalizerReleaseNodes)
	if has == on {
		return nil
	}
	fins := slices.DeleteFunc(slices.Clone(fresh.Finalizers), func(f string) bool { return f == model.FinalizerReleaseNodes })
	if on {
		fins = append(fins, model.FinalizerReleaseNodes)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": fins, "resourceVersion": fresh.ResourceVersion}})
	if err != nil {
		return fmt.Errorf("encoding the finalizer patch: %w", err)
	}
	if _, err := rollouts.Patch(ctx, nr.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: model.FieldManager}); err != nil {
		return fmt.Errorf("%s NodeRollout %s's finalizer: %w", map[bool]string{true: "adding", false: "removing"}[on], nr.Name, err)
	}
	if !on {
		recorder.Eventf(nr, corev1.EventTypeNormal, "Released", "rollout %s deleted: every node it held is released", nr.Name)
	}
	return nil
}
