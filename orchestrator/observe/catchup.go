package observe

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/metadata"
)

// catchUpTimeout bounds CatchUp. Past it the leader goes on from its cache:
// the node writes are conditional and the swapped.nodewise.io records keep a
// pod from being deleted twice, so a cache that is still behind costs a
// conflict and a retry, not a wrong action.
const catchUpTimeout = 10 * time.Second

// CatchUp waits, after this replica wins the Lease, until its node cache
// holds everything a consistent read of the API shows. Replicas sync their
// caches before campaigning, so the cache of a new leader may still be
// missing the previous leader's last node records (the watch delay); the
// node records are what the executor resumes from. It lists the nodes'
// metadata (a quorum read: the resourceVersions are all it compares, and
// the metadata alone took half the time of the whole nodes, 52-67 ms
// against 111-123 ms at 2,000 nodes) and returns once every listed node is
// in the cache at the listed resourceVersion, listing again while a node
// differs: a node written since the list shows a newer version in the cache
// than in the list, and resourceVersions may only be compared for equality.
func CatchUp(ctx context.Context, md metadata.Interface, nodes corelisters.NodeLister) (rounds int, err error) {
	ctx, cancel := context.WithTimeout(ctx, catchUpTimeout)
	defer cancel()
	var last error // the last read that failed, reported with the timeout
	err = wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		rounds++
		list, err := md.Resource(corev1.SchemeGroupVersion.WithResource("nodes")).List(ctx, metav1.ListOptions{})
		if err != nil {
			last = fmt.Errorf("listing nodes: %w", err)
			return false, nil // retried until the timeout
		}
		cached, err := nodes.List(labels.Everything())
		if err != nil {
			last = fmt.Errorf("reading the node cache: %w", err)
			return false, nil
		}
		last = nil
		have := make(map[string]string, len(cached))
		for _, n := range cached {
			have[n.Name] = n.ResourceVersion
		}
		for i := range list.Items {
			if have[list.Items[i].Name] != list.Items[i].ResourceVersion {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil && last != nil {
		return rounds, fmt.Errorf("node cache not caught up with the API after %d reads: %w (last: %w)", rounds, err, last)
	}
	if err != nil {
		return rounds, fmt.Errorf("node cache not caught up with the API after %d reads: %w", rounds, err)
	}
	return rounds, nil
}
