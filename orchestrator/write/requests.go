package write

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// Requests records the requests due on a NodeRollout (model.DueRequests)
// in its status.requests, one entry per verb, then emits an Event naming
// who asked for each. A crash between the two loses the Event, never the
// record.
func Requests(ctx context.Context, st *Status, recorder record.EventRecorder, nr *v1alpha1.NodeRollout, due []v1alpha1.VerbRequest) error {
	if len(due) == 0 {
		return nil
	}
	if err := st.Mutate(ctx, nr.Name, func(s *v1alpha1.NodeRolloutStatus) {
		for _, r := range due {
			if i := slices.IndexFunc(s.Requests, func(x v1alpha1.VerbRequest) bool { return x.Verb == r.Verb }); i >= 0 {
				s.Requests[i] = r
			} else {
				s.Requests = append(s.Requests, r)
			}
		}
	}); err != nil {
		return fmt.Errorf("recording who asked for %s: %w", due[0].Verb, err)
	}
	for _, r := range due {
		recorder.Eventf(nr, corev1.EventTypeNormal, model.RequestReason(r.Verb), "%s", model.RequestLine(r))
	}
	return nil
}
