// Package promotion reads a NodeRollout's upstream clusters (spec.promotion)
// and says what they still lack before the rollout may start: the same
// target images Completed there long enough ago, judged at least as
// strictly, none of them Halted. It fails closed: an upstream that cannot
// be read holds the rollout, with its error.
package promotion

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/clusters"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// Reader answers Hold, reading each upstream at most once per TTL for a
// rollout's generation and images.
type Reader struct {
	clusters.Upstreams
}

// Hold says what nr's upstream clusters still lack for the images of
// targets, each upstream's answer joined, or "" when every one has it (or
// nr asks for no promotion).
func (r *Reader) Hold(ctx context.Context, nr *v1alpha1.NodeRollout, targets []model.TargetView) string {
	pr := nr.Spec.Promotion
	if pr == nil {
		return ""
	}
	want := clusters.Want{SoakAfter: clusters.SoakAfter(pr), Spec: nr.Spec}
	for _, t := range targets {
		want.Images = append(want.Images, t.Images...)
	}
	slices.Sort(want.Images)
	want.Images = slices.Compact(want.Images)
	key := fmt.Sprintf("%s/%d/%s", nr.UID, nr.Generation, strings.Join(want.Images, ","))
	return r.Ask(ctx, key, pr, func(ctx context.Context, c clusters.Cluster, now time.Time) string {
		return clusters.Promoted(ctx, c, want, now)
	})
}
