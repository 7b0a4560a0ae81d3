package revisions

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/clusters"
)

// ConditionPromoted is False while spec.promotion holds a migration that
// has not started in Pending (reason WaitingForUpstream, the message what
// the upstream clusters lack), and True once it started.
const ConditionPromoted = "Promoted"

// promotionHold says what spec.promotion's upstream clusters still lack
// before a migration to istiod version toVersion may start, each
// upstream's answer joined, or "" when every one has it (or the migration
// asks for no promotion). Each upstream is read at most once per TTL for
// the migration's generation and version.
func (c *Controller) promotionHold(ctx context.Context, rm *v1alpha1.RevisionMigration, spec v1alpha1.RevisionMigrationSpec, toVersion string) string {
	pr := spec.Promotion
	switch {
	case pr == nil:
		return ""
	case c.cfg.Namespace == "":
		return "this process reads no upstream cluster (revisions.Config.Namespace is empty)"
	}
	want := clusters.WantMigration{ToVersion: toVersion, SoakAfter: clusters.SoakAfter(pr), Spec: spec}
	key := fmt.Sprintf("%s/%d/%s", rm.UID, rm.Generation, toVersion)
	return c.upstreams.Ask(ctx, key, pr, func(ctx context.Context, cl clusters.Cluster, now time.Time) string {
		return clusters.PromotedMigration(ctx, cl, want, now)
	})
}

// setPromoted records the Promoted condition of a migration that asks for
// promotion: False with what the upstreams lack, True when hold is "".
func setPromoted(rm *v1alpha1.RevisionMigration, hold string) {
	if rm.Spec.Promotion == nil {
		return
	}
	cond := metav1.Condition{Type: ConditionPromoted, Status: metav1.ConditionTrue, Reason: "UpstreamSucceeded", ObservedGeneration: rm.Generation}
	if hold != "" {
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, "WaitingForUpstream", hold
	}
	meta.SetStatusCondition(&rm.Status.Conditions, cond)
}
