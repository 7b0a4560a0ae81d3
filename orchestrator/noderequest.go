package orchestrator

import (
	"context"
	"fmt"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/planner"
)

// nodeRequest acts on a pending `nodewise retry` or `nodewise skip`: it
// records the node's new state (its record and status entry, one persist),
// ends the halt the node's failure made when none is left, emits an Event,
// and acknowledges the request. handled says a request was acted on (or
// refused): the pass plans again from the next snapshot. A crash before the
// acknowledgement acts again, finding the node already in its state.
func (e *executor) nodeRequest(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, snap model.Snapshot) (handled bool, err error) {
	r, pending, err := model.PendingNodeRequest(nr.Annotations)
	if err != nil {
		e.log.Warn("ignoring a node request", zap.String("rollout", nr.Name), zap.Error(err))
		return false, nil
	}
	if !pending {
		return false, nil
	}
	d := planner.DecideRequest(snap, p, r)
	switch {
	case d.Refused != "":
		e.recorder.Eventf(nr, corev1.EventTypeWarning, "NodeRequestRefused", "%s", d.Refused)
		e.log.Info("node request refused", zap.String("rollout", nr.Name), zap.String("node", r.Node), zap.String("reason", d.Refused))
	case d.State != "":
		if err := e.worker.PersistState(ctx, nr, r.Node, d.State, d.Reason); err != nil {
			return true, fmt.Errorf("%s of node %s: %w", r.Verb, r.Node, err)
		}
		if d.ClearsHalt {
			if err := e.status.Mutate(ctx, nr.Name, func(s *v1alpha1.NodeRolloutStatus) {
				if s.Phase == v1alpha1.PhaseHalted {
					s.Phase, s.HaltReason = v1alpha1.PhaseProgressing, ""
				}
			}); err != nil {
				return true, fmt.Errorf("ending the halt after the %s of node %s: %w", r.Verb, r.Node, err)
			}
		}
		reason := map[string]string{model.VerbRetry: "NodeRetried", model.VerbSkip: "NodeSkipped"}[r.Verb]
		e.recorder.Eventf(nr, corev1.EventTypeNormal, reason, "node %s %s", r.Node, d.Reason)
		e.log.Info("node request", zap.String("rollout", nr.Name), zap.String("node", r.Node), zap.String("verb", r.Verb), zap.String("reason", d.Reason))
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, model.AnnotationAckedNodeRequest, r.Token)
	if _, err := e.rollouts.Patch(ctx, nr.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: model.FieldManager}); err != nil {
		return true, fmt.Errorf("acknowledging the %s of node %s: %w", r.Verb, r.Node, err)
	}
	return true, nil
}
