// Package promotion reads a NodeRollout's upstream clusters (spec.promotion)
// and says what they still lack before the rollout may start: the same
// target images Completed there long enough ago, judged at least as
// strictly, none of them Halted. It fails closed: an upstream that cannot
// be read holds the rollout, with its error.
package promotion

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/clusters"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// DefaultSoakAfter is spec.promotion.soakAfter's default.
const DefaultSoakAfter = 24 * time.Hour

// Reader answers Hold, reading each upstream at most once per TTL for a
// rollout's generation and images.
type Reader struct {
	// Kube reads the kubeconfig Secrets in Namespace, the orchestrator's.
	Kube      kubernetes.Interface
	Namespace string
	Now       func() time.Time
	// TTL is how long an answer is reused (default 10s); Timeout bounds
	// the reading of one upstream (default 10s).
	TTL, Timeout time.Duration

	mu    sync.Mutex
	cache map[string]answer
}

type answer struct {
	hold string
	at   time.Time
}

// Hold says what nr's upstream clusters still lack for the images of
// targets, each upstream's answer joined, or "" when every one has it (or
// nr asks for no promotion).
func (r *Reader) Hold(ctx context.Context, nr *v1alpha1.NodeRollout, targets []model.TargetView) string {
	pr := nr.Spec.Promotion
	if pr == nil {
		return ""
	}
	want := clusters.Want{SoakAfter: DefaultSoakAfter, Spec: nr.Spec}
	if pr.SoakAfter != nil {
		want.SoakAfter = pr.SoakAfter.Duration
	}
	for _, t := range targets {
		want.Images = append(want.Images, t.Images...)
	}
	slices.Sort(want.Images)
	want.Images = slices.Compact(want.Images)
	key := fmt.Sprintf("%s/%d/%s", nr.UID, nr.Generation, strings.Join(want.Images, ","))
	now := r.Now()
	r.mu.Lock()
	a, ok := r.cache[key]
	r.mu.Unlock()
	if ok && now.Sub(a.at) < cmp.Or(r.TTL, 10*time.Second) {
		return a.hold
	}
	var holds []string
	for _, u := range pr.Upstreams {
		if h := r.upstream(ctx, u, want, now); h != "" {
			holds = append(holds, h)
		}
	}
	hold := strings.Join(holds, "; ")
	r.mu.Lock()
	if r.cache == nil {
		r.cache = map[string]answer{}
	}
	for k, a := range r.cache { // answers outlive their TTL only until the next read
		if now.Sub(a.at) >= cmp.Or(r.TTL, 10*time.Second) {
			delete(r.cache, k)
		}
	}
	r.cache[key] = answer{hold: hold, at: now}
	r.mu.Unlock()
	return hold
}

func (r *Reader) upstream(ctx context.Context, u v1alpha1.Upstream, want clusters.Want, now time.Time) string {
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(r.Timeout, 10*time.Second))
	defer cancel()
	s, err := r.Kube.CoreV1().Secrets(r.Namespace).Get(ctx, u.KubeconfigSecret, metav1.GetOptions{})
	if err != nil {
		return fmt.Sprintf("cannot read upstream %s: its kubeconfig Secret %s/%s: %v", u.Name, r.Namespace, u.KubeconfigSecret, err)
	}
	c := clusters.FromSecret(s)
	c.Name = u.Name
	if c.Config != nil {
		c.Config.Timeout = cmp.Or(r.Timeout, 10*time.Second)
	}
	return clusters.Promoted(ctx, c, want, now)
}
