package nodeagent

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// KubePodLister names the node's pods from the Kubernetes API, listing at
// most once per TTL (default 10s).
type KubePodLister struct {
	Client kubernetes.Interface
	Node   string
	TTL    time.Duration

	mu      sync.Mutex
	fetched time.Time
	byUID   map[string]Pod
}

// PodsByUID returns the node's pods by UID.
func (l *KubePodLister) PodsByUID(ctx context.Context) (map[string]Pod, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ttl := l.TTL
	if ttl == 0 {
		ttl = 10 * time.Second
	}
	if l.byUID != nil && time.Since(l.fetched) < ttl {
		return l.byUID, nil
	}
	list, err := l.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", l.Node).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("listing pods on node %s: %w", l.Node, err)
	}
	out := make(map[string]Pod, len(list.Items))
	for _, p := range list.Items {
		out[string(p.UID)] = Pod{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}
	}
	l.byUID, l.fetched = out, time.Now()
	return out, nil
}
