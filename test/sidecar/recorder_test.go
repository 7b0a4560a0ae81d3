package sidecar

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/kubectl/pkg/util/podutils"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// recorder watches the pods of test namespaces, independently of the
// controller: creation times (for the restart rate) and, per app, the number
// of Ready pods after every event (for PDB violations).
type recorder struct {
	mu       sync.Mutex
	created  map[string]time.Time // pod UID -> creation
	ready    map[string]map[string]bool
	minReady map[string]int
	floor    map[string]int // app -> fewest Ready pods its PDB allows
	below    []string
}

// podUIDs lists the UIDs of the pods in namespaces with prefix.
func podUIDs(t *testing.T, ctx context.Context, cs kubernetes.Interface, prefix string) map[string]bool {
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, p := range pods.Items {
		if strings.HasPrefix(p.Namespace, prefix) {
			out[string(p.UID)] = true
		}
	}
	return out
}

func watchPods(t *testing.T, ctx context.Context, cs kubernetes.Interface, prefix string, floor map[string]int) *recorder {
	r := &recorder{created: map[string]time.Time{}, ready: map[string]map[string]bool{}, minReady: map[string]int{}, floor: floor}
	w, err := cs.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || !strings.HasPrefix(p.Namespace, prefix) {
				continue
			}
			r.observe(ev.Type, p)
		}
	}()
	t.Cleanup(w.Stop)
	return r
}

func (r *recorder) observe(typ watch.EventType, p *corev1.Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := p.Namespace + "/" + p.Labels["app"]
	if _, ok := r.created[string(p.UID)]; !ok {
		r.created[string(p.UID)] = p.CreationTimestamp.Time
	}
	ready := typ != watch.Deleted && p.DeletionTimestamp == nil && podutils.IsPodReady(p)
	if r.ready[key] == nil {
		r.ready[key] = map[string]bool{}
	}
	was := r.ready[key][p.Name]
	if ready {
		r.ready[key][p.Name] = true
	} else {
		delete(r.ready[key], p.Name)
	}
	n := len(r.ready[key])
	if was && !ready {
		if f, ok := r.floor[key]; ok && n < f {
			r.below = append(r.below, fmt.Sprintf("%s: %d Ready pods, PDB floor %d (pod %s)", key, n, f, p.Name))
		}
		if m, ok := r.minReady[key]; !ok || n < m {
			r.minReady[key] = n
		}
	}
}

// violations lists every moment an app had fewer Ready pods than its PDB allows.
func (r *recorder) violations() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.below...)
}

// createdExcept returns the creation times of pods not in before, sorted.
func (r *recorder) createdExcept(before map[string]bool) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []time.Time
	for uid, c := range r.created {
		if !before[uid] {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

// maxInWindow is the most creations within any window of length w.
func maxInWindow(ts []time.Time, w time.Duration) int {
	best, j := 0, 0
	for i := range ts {
		for ts[i].Sub(ts[j]) >= w {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}
