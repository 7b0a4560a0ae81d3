package write

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/observe"
)

// TestNodeConflictWaitsForTheCache: a conditional node patch that conflicts
// (someone wrote the node after the copy it was based on) is retried from
// the cache once the watch shows that write, without a read from the API.
func TestNodeConflictWaitsForTheCache(t *testing.T) {
	node := func(rv string, taint bool) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a", ResourceVersion: rv}}
		if taint {
			n.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}}
		}
		return n
	}
	kube := fake.NewClientset(node("8", true))
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	_ = idx.Add(node("7", false)) // the cache has not seen the taint
	w := &Nodes{Kube: kube, Cache: corelisters.NewNodeLister(idx), Changes: &observe.Changes{}, Now: time.Now, Log: zap.NewNop()}
	var patchRVs []string
	kube.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		var body struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		_ = json.Unmarshal(a.(k8stesting.PatchAction).GetPatch(), &body)
		patchRVs = append(patchRVs, body.Metadata.ResourceVersion)
		if body.Metadata.ResourceVersion != "8" {
			go func() { // the watch delivers the taint a little later
				time.Sleep(50 * time.Millisecond)
				_ = idx.Update(node("8", true))
				w.Changes.Broadcast()
			}()
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, "a", errors.New("changed"))
		}
		return false, nil, nil
	})
	if _, err := w.Cordon(context.Background(), "r", "a", nodestep.Record{}, nil); err != nil {
		t.Fatalf("cordon: %v", err)
	}
	for _, a := range kube.Actions() {
		if a.GetVerb() == "get" {
			t.Errorf("the node was read from the API after the conflict: %v", a)
		}
	}
	if strings.Join(patchRVs, ",") != "7,8" {
		t.Errorf("patches conditional on %v; want 7, then 8 (the cache's copy after the watch)", patchRVs)
	}
}
