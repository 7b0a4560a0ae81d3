package clusters

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// DefaultSoakAfter is spec.promotion.soakAfter's default.
const DefaultSoakAfter = 24 * time.Hour

// SoakAfter is pr's soakAfter, or its default.
func SoakAfter(pr *v1alpha1.PromotionSpec) time.Duration {
	if pr.SoakAfter != nil {
		return pr.SoakAfter.Duration
	}
	return DefaultSoakAfter
}

// Upstreams reads the upstream clusters a spec.promotion names, each with
// the kubeconfig in a Secret of Namespace, and reuses each answer for TTL:
// a controller may ask on every pass and still read each upstream at most
// once per TTL.
type Upstreams struct {
	// Kube reads the kubeconfig Secrets in Namespace, the controller's.
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

// Ask asks each of pr's upstreams with ask (Promoted or PromotedMigration,
// bound to what the object wants) and joins what they lack, "" when every
// one has it. key names the question (the object, its generation and what
// it wants): the answer to the same key is reused for TTL. An upstream
// whose Secret cannot be read lacks everything, with the error.
func (u *Upstreams) Ask(ctx context.Context, key string, pr *v1alpha1.PromotionSpec, ask func(ctx context.Context, c Cluster, now time.Time) string) string {
	ttl := cmp.Or(u.TTL, 10*time.Second)
	now := u.Now()
	u.mu.Lock()
	a, ok := u.cache[key]
	u.mu.Unlock()
	if ok && now.Sub(a.at) < ttl {
		return a.hold
	}
	var holds []string
	for _, up := range pr.Upstreams {
		if h := u.one(ctx, up, ask, now); h != "" {
			holds = append(holds, h)
		}
	}
	hold := strings.Join(holds, "; ")
	u.mu.Lock()
	if u.cache == nil {
		u.cache = map[string]answer{}
	}
	for k, a := range u.cache { // answers outlive their TTL only until the next read
		if now.Sub(a.at) >= ttl {
			delete(u.cache, k)
		}
	}
	u.cache[key] = answer{hold: hold, at: now}
	u.mu.Unlock()
	return hold
}

func (u *Upstreams) one(ctx context.Context, up v1alpha1.Upstream, ask func(ctx context.Context, c Cluster, now time.Time) string, now time.Time) string {
	timeout := cmp.Or(u.Timeout, 10*time.Second)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	s, err := u.Kube.CoreV1().Secrets(u.Namespace).Get(ctx, up.KubeconfigSecret, metav1.GetOptions{})
	if err != nil {
		return fmt.Sprintf("cannot read upstream %s: its kubeconfig Secret %s/%s: %v", up.Name, u.Namespace, up.KubeconfigSecret, err)
	}
	c := FromSecret(s)
	c.Name = up.Name
	if c.Config != nil {
		c.Config.Timeout = timeout
	}
	return ask(ctx, c, now)
}
