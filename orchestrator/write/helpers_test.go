package write

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/observe"
)

var nodesGVR = corev1.SchemeGroupVersion.WithResource("nodes")
var nodesGR = schema.GroupResource{Resource: "nodes"}

// fastConflicts shortens ConflictBackoff for the test, so a test that runs
// it out does not sleep for seconds.
func fastConflicts(t *testing.T) {
	t.Helper()
	saved := ConflictBackoff
	ConflictBackoff = wait.Backoff{Steps: 4, Duration: time.Millisecond, Factor: 1}
	t.Cleanup(func() { ConflictBackoff = saved })
}

// testNode is a node at resourceVersion rv with annotations ann (pairs).
func testNode(name, rv string, unschedulable bool, ann ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name), ResourceVersion: rv}}
	n.Spec.Unschedulable = unschedulable
	if len(ann) > 0 {
		n.Annotations = map[string]string{}
		for i := 0; i+1 < len(ann); i += 2 {
			n.Annotations[ann[i]] = ann[i+1]
		}
	}
	return n
}

// nodesEnv is a Nodes writer over a fake clientset holding api and an
// informer cache holding cached, with a fake clock and recorder.
type nodesEnv struct {
	w      *Nodes
	kube   *fake.Clientset
	idx    cache.Indexer
	events *record.FakeRecorder
}

func newNodesEnv(t *testing.T, api, cached []*corev1.Node) *nodesEnv {
	t.Helper()
	var objs []runtime.Object
	for _, n := range api {
		objs = append(objs, n)
	}
	kube := fake.NewClientset(objs...)
	servePatches(kube)
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, n := range cached {
		if err := idx.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	events := record.NewFakeRecorder(10)
	clock := &fixture.Clock{T: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), Step: time.Second}
	w := &Nodes{Kube: kube, Cache: corelisters.NewNodeLister(idx), Changes: &observe.Changes{}, Now: clock.Now, Log: zap.NewNop(), Recorder: events}
	return &nodesEnv{w: w, kube: kube, idx: idx, events: events}
}

// patchBody is a node patch as Nodes.Patch sends it.
type patchBody struct {
	Metadata struct {
		ResourceVersion string             `json:"resourceVersion"`
		Annotations     map[string]*string `json:"annotations"`
	} `json:"metadata"`
	Spec *struct {
		Unschedulable *bool `json:"unschedulable"`
	} `json:"spec"`
}

func decodePatch(t *testing.T, a k8stesting.Action) patchBody {
	t.Helper()
	var b patchBody
	if err := json.Unmarshal(a.(k8stesting.PatchAction).GetPatch(), &b); err != nil {
		t.Fatalf("decoding patch: %v", err)
	}
	return b
}

// servePatches makes the fake clientset answer node merge patches as the
// API server does: 409 when the patch names a resourceVersion other than the
// stored one, else the merged node under the next resourceVersion. (The
// fake's own tracker neither checks nor bumps resourceVersions.)
func servePatches(kube *fake.Clientset) {
	kube.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.PatchAction)
		obj, err := kube.Tracker().Get(nodesGVR, "", p.GetName())
		if err != nil {
			return true, nil, err
		}
		cur := obj.(*corev1.Node)
		var meta struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(p.GetPatch(), &meta); err != nil {
			return true, nil, apierrors.NewBadRequest(err.Error())
		}
		if rv := meta.Metadata.ResourceVersion; rv != "" && rv != cur.ResourceVersion {
			return true, nil, apierrors.NewConflict(nodesGR, p.GetName(), errors.New("the object has been modified"))
		}
		old, err := json.Marshal(cur)
		if err != nil {
			return true, nil, err
		}
		merged, err := jsonpatch.MergePatch(old, p.GetPatch())
		if err != nil {
			return true, nil, apierrors.NewBadRequest(err.Error())
		}
		out := &corev1.Node{}
		if err := json.Unmarshal(merged, out); err != nil {
			return true, nil, err
		}
		n, _ := strconv.Atoi(cur.ResourceVersion)
		out.ResourceVersion = strconv.Itoa(n + 1)
		if err := kube.Tracker().Update(nodesGVR, out, "", metav1.UpdateOptions{FieldManager: "api-server"}); err != nil {
			return true, nil, err
		}
		return true, out.DeepCopy(), nil
	})
}

// stored is the node as the fake API holds it.
func (e *nodesEnv) stored(t *testing.T, name string) *corev1.Node {
	t.Helper()
	obj, err := e.kube.Tracker().Get(nodesGVR, "", name)
	if err != nil {
		t.Fatalf("node %s: %v", name, err)
	}
	return obj.(*corev1.Node)
}

// actions are the fake clientset's recorded requests of verb on nodes.
func (e *nodesEnv) actions(verb string) []k8stesting.Action {
	var out []k8stesting.Action
	for _, a := range e.kube.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == "nodes" {
			out = append(out, a)
		}
	}
	return out
}

// failNodes makes every request verb on nodes answer err.
func failNodes(kube *fake.Clientset, verb string, err error) {
	kube.PrependReactor(verb, "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, err
	})
}

// drainEvents are the events the fake recorder holds.
func drainEvents(r *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// testRollout is a NodeRollout called name with UID name-uid.
func testRollout(name string) *v1alpha1.NodeRollout {
	return &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(name + "-uid")}}
}

// setNode is a status mutation putting node in state st.
func setNode(node string, st v1alpha1.NodeState) func(*v1alpha1.NodeRolloutStatus) {
	return func(s *v1alpha1.NodeRolloutStatus) { model.NodeEntry(s, node).State = st }
}

// nodeStates are a status's nodes as "name=state", in order.
func nodeStates(s v1alpha1.NodeRolloutStatus) string {
	var out []string
	for _, n := range s.Nodes {
		out = append(out, n.Name+"="+string(n.State))
	}
	return strings.Join(out, ",")
}

// countCalls counts the fake's calls "verb name" (read after Status.Wait).
func countCalls(r *fixture.Rollouts, call string) int {
	return len(slices.DeleteFunc(slices.Clone(r.Calls), func(c string) bool { return c != call }))
}

// blockFirst makes the first call of verb that the fake gets after this
// wait until release is called, then answer err (nil: as the fake does).
// entered is closed once that call is waiting. Other calls answer at once.
func blockFirst(r *fixture.Rollouts, verb string, err error) (entered <-chan struct{}, release func()) {
	in, out := make(chan struct{}), make(chan struct{})
	blocked := false
	r.Fail = func(v, _ string) error { // called with the fake's lock held: one at a time
		if v != verb || blocked {
			return nil
		}
		blocked = true
		close(in)
		<-out
		return err
	}
	return in, func() { close(out) }
}

// waitQueued waits until n mutations are queued for the writer.
func waitQueued(w *Status, n int) {
	for {
		w.mu.Lock()
		got := len(w.pending)
		w.mu.Unlock()
		if got >= n {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// pinPacing makes the writer hold writes behind until somebody waits for
// one: the last write is dated in the future, so the pacing delay cannot
// run out during the test.
func pinPacing(w *Status) {
	w.mu.Lock()
	w.last = time.Now().Add(time.Hour)
	w.mu.Unlock()
}
