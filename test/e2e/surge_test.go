package e2e

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/kubectl/pkg/util/podutils"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/swap"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/testkit"
)

var ztunnelRef = v1alpha1.TargetRef{Namespace: ns, Name: cluster.ZtunnelName}

// TestSurgeSwapMakesBeforeBreak: the surge primitive swaps ztunnel node by
// node in the order it is given. On each node the bridge is Ready beside the
// old pod before the old pod is deleted, the DaemonSet adopts the bridge (it
// creates no pod of its own: one drain per node), no other node changes, an
// independent watcher sampling every 0.5 s never sees a node without a Ready
// ztunnel, and nothing of nodewise's is left. A rollback starts a fresh
// old-version bridge and deletes the newer pod only once it is Ready.
func TestSurgeSwapMakesBeforeBreak(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3, 1)
	ctx := context.Background()
	e.drainModel(3 * time.Second)
	w := e.watchZtunnels(t)
	e.upgrade("1.28.1")
	e.slowStart(2 * time.Second) // so a swap that did not wait for Ready would show
	newHash := e.newestHash(cluster.ZtunnelName)
	s := swap.Surger{Kube: e.c.Client}
	for _, node := range []string{"node-002", "node-003", "node-001"} {
		old := e.ztunnelPod(node)
		others := e.ztunnelUIDs(node)
		res, err := s.Swap(ctx, ztunnelRef, node, time.Now().Add(time.Minute))
		if err != nil {
			t.Fatalf("surge on %s: %v", node, err)
		}
		t.Logf("%s: %+v", node, res)
		if res.Bridge == "" || res.HandedOver != res.Bridge || res.Pod != res.Bridge || !slices.Equal(res.Retired, []string{old.Name}) {
			t.Errorf("%s: %+v; want a bridge created, %s retired, the bridge handed over and kept", node, res, old.Name)
		}
		now := e.ztunnelPod(node)
		if c := metav1.GetControllerOf(now); c == nil || c.Kind != "DaemonSet" || now.Labels["controller-revision-hash"] != newHash {
			t.Errorf("%s: pod %s controller %v revision %s; want the DaemonSet's, on %s", node, now.Name, c, now.Labels["controller-revision-hash"], newHash)
		}
		if after := e.ztunnelUIDs(node); !mapsEqual(others, after) {
			t.Errorf("surge on %s changed other nodes' ztunnels: %v → %v", node, others, after)
		}
		w.requireReadyBefore(t, res.Bridge, old.UID)
	}
	e.waitOldGone(newHash)
	w.check(t)
	if n := w.createdByDaemonSet(); n != 0 {
		t.Errorf("the DaemonSet created %d ztunnel pods; want 0 (each node's bridge is adopted: one drain per node)", n)
	}
	e.requireNoSurgeLeftovers()
	ds, err := e.c.Client.AppsV1().DaemonSets(ns).Get(ctx, cluster.ZtunnelName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ds.Status.UpdatedNumberScheduled != 3 || ds.Status.NumberReady != 3 {
		t.Errorf("DaemonSet status: %d updated, %d ready; want 3 and 3", ds.Status.UpdatedNumberScheduled, ds.Status.NumberReady)
	}

	// Rollback of one node: the restored revision's fresh pod starts beside
	// the newer one, which goes only once it is Ready.
	e.upgrade("1.27.3")
	oldHash := e.newestHash(cluster.ZtunnelName)
	newer := e.ztunnelPod("node-002")
	res, err := s.Swap(ctx, ztunnelRef, "node-002", time.Now().Add(time.Minute))
	if err != nil {
		t.Fatalf("rollback surge: %v", err)
	}
	if res.Bridge == "" || !slices.Equal(res.Retired, []string{newer.Name}) {
		t.Errorf("rollback: %+v; want a fresh bridge and %s retired", res, newer.Name)
	}
	if got := e.ztunnelPod("node-002"); got.Labels["controller-revision-hash"] != oldHash {
		t.Errorf("rollback: node-002 runs revision %s; want the restored %s", got.Labels["controller-revision-hash"], oldHash)
	}
	w.requireReadyBefore(t, res.Bridge, newer.UID)
	time.Sleep(time.Second)
	w.check(t)
	e.requireNoSurgeLeftovers()
}

// TestSurgeResumesAfterCrashAtEveryStep: a surge swap stopped after each of
// its writes (the bridge created; the anchor deleted, which hands the bridge
// over) is finished by a fresh Surger that knows nothing but the API.
// Resumed after the anchor's deletion, even after an outage in which the old
// pod drained and went, it has nothing left to write: the garbage collector
// handed the bridge over and the DaemonSet adopted it, creating no pod of its
// own. No node is ever without a Ready ztunnel and nothing is left behind.
func TestSurgeResumesAfterCrashAtEveryStep(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 4, 1)
	ctx := context.Background()
	e.drainModel(4 * time.Second)
	w := e.watchZtunnels(t)
	e.upgrade("1.28.1")
	hash := e.newestHash(cluster.ZtunnelName)
	s := swap.Surger{Kube: e.c.Client}
	cases := []struct {
		node, crashAfter string
		outage           bool
	}{
		{"node-001", "bridge created", false},
		{"node-002", "old pod deleted", false},
		{"node-003", "old pod deleted", true},
	}
	for _, c := range cases {
		old := e.ztunnelPod(c.node)
		e.surgeUntil(c.node, c.crashAfter)
		if c.outage {
			// nodewise down: the old pod drains and goes; the bridge was
			// handed over before it went.
			e.waitFor(func(ctx context.Context) bool {
				_, err := e.c.Client.CoreV1().Pods(ns).Get(ctx, old.Name, metav1.GetOptions{})
				return apierrors.IsNotFound(err)
			}, "the old pod gone from "+c.node)
		}
		res, err := s.Swap(ctx, ztunnelRef, c.node, time.Now().Add(time.Minute))
		if err != nil {
			t.Fatalf("%s: resuming after a crash once %s: %v", c.node, c.crashAfter, err)
		}
		t.Logf("%s, crashed once %s (outage %v), resumed: %+v", c.node, c.crashAfter, c.outage, res)
		now := e.ztunnelPod(c.node)
		if now.Labels["controller-revision-hash"] != hash || metav1.GetControllerOf(now).Kind != "DaemonSet" {
			t.Errorf("%s: pod %s on %s controlled by %v; want the DaemonSet's on %s", c.node, now.Name, now.Labels["controller-revision-hash"], metav1.GetControllerOf(now), hash)
		}
		if c.crashAfter == "old pod deleted" && res.Writes != 0 {
			t.Errorf("%s: %+v after the anchor's deletion; want no write (the garbage collector and the DaemonSet finish the hand-over)", c.node, res)
		}
	}
	if _, err := s.Swap(ctx, ztunnelRef, "node-004", time.Now().Add(time.Minute)); err != nil { // no crash
		t.Fatalf("node-004: %v", err)
	}
	e.waitOldGone(hash)
	w.check(t)
	if n := w.createdByDaemonSet(); n != 0 {
		t.Errorf("the DaemonSet created %d pods; want 0 (every bridge adopted, the outage's too)", n)
	}
	e.requireNoSurgeLeftovers()
}

// TestSurgeAnchorDeletedBySomeoneElse: the old pod deleted by someone else
// (kubectl delete, the default propagation) while its bridge is Ready takes
// the bridge with it (the garbage collector), and the DaemonSet replaces the
// node's pod once the old one is gone, as it would without nodewise; a
// resumed swap then finds the DaemonSet's pod on the newest revision and
// writes nothing.
func TestSurgeAnchorDeletedBySomeoneElse(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, 1)
	ctx := context.Background()
	e.upgrade("1.28.1")
	hash := e.newestHash(cluster.ZtunnelName)
	old := e.ztunnelPod("node-001")
	e.surgeUntil("node-001", "bridge created")
	var bridge *corev1.Pod
	e.waitFor(func(ctx context.Context) bool {
		for _, p := range e.surgeLeftovers() {
			if podutils.IsPodReady(p) {
				bridge = p
				return true
			}
		}
		return false
	}, "the bridge Ready")
	if c := metav1.GetControllerOf(bridge); c == nil || c.Kind != "Pod" || c.UID != old.UID {
		t.Fatalf("bridge %s controlled by %+v; want the old pod %s", bridge.Name, c, old.Name)
	}
	if err := e.c.Client.CoreV1().Pods(ns).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(func(ctx context.Context) bool {
		p, err := e.c.Client.CoreV1().Pods(ns).Get(ctx, bridge.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && p.UID == bridge.UID && p.DeletionTimestamp != nil)
	}, "the garbage collector to delete the bridge with its anchor")
	e.waitFor(func(ctx context.Context) bool {
		p := e.ztunnelPodOrNil("node-001")
		c := metav1.GetControllerOf(p)
		return p != nil && p.UID != bridge.UID && c != nil && c.Kind == "DaemonSet" && podutils.IsPodReady(p) && p.Labels["controller-revision-hash"] == hash
	}, "the DaemonSet's own pod on the newest revision")
	res, err := (swap.Surger{Kube: e.c.Client}).Swap(ctx, ztunnelRef, "node-001", time.Now().Add(time.Minute))
	if err != nil {
		t.Fatalf("resuming: %v", err)
	}
	if res.Writes != 0 {
		t.Errorf("resumed swap %+v; want nothing to write", res)
	}
	e.requireNoSurgeLeftovers()
}

// TestSurgeNeverReadyHalts: a new ztunnel that never gets Ready times the
// swap out; its bridge is deleted and the old pod, never touched, keeps
// serving.
func TestSurgeNeverReadyHalts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, 1)
	ctx := context.Background()
	old := e.ztunnelPod("node-001")
	e.upgrade("1.28.2-neverready")
	e.newestHash(cluster.ZtunnelName)
	res, err := swap.Surger{Kube: e.c.Client}.Swap(ctx, ztunnelRef, "node-001", time.Now().Add(5*time.Second))
	if !errors.Is(err, swap.ErrSurgeTimeout) {
		t.Fatalf("surge of a never-Ready build: %v (%+v); want ErrSurgeTimeout", err, res)
	}
	t.Logf("halted: %v", err)
	now := e.ztunnelPod("node-001")
	if now.UID != old.UID || !podutils.IsPodReady(now) {
		t.Errorf("node-001 runs %s (Ready %v); want the old pod %s, untouched and Ready", now.Name, podutils.IsPodReady(now), old.Name)
	}
	e.waitFor(func(ctx context.Context) bool { return len(e.surgeLeftovers()) == 0 }, "the never-Ready bridge gone")
}

// TestSurgeNodewiseDownNodeAdded: nodewise stops mid-swap (bridge Ready
// beside the old pod) and stays down while a node joins. Nothing swaps by
// itself, every node keeps a Ready ztunnel, the new node gets its ztunnel
// from the DaemonSet; back up, nodewise finishes the node and finds the new
// one already on the newest revision.
func TestSurgeNodewiseDownNodeAdded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, 1)
	ctx := context.Background()
	w := e.watchZtunnels(t)
	e.upgrade("1.28.1")
	hash := e.newestHash(cluster.ZtunnelName)
	e.surgeUntil("node-001", "bridge created")
	e.waitFor(func(ctx context.Context) bool {
		for _, p := range e.surgeLeftovers() {
			if podutils.IsPodReady(p) {
				return true
			}
		}
		return false
	}, "the bridge Ready")
	before := e.ztunnelUIDs("")
	spec := e.addNodeServedByDaemonSet(hash)
	time.Sleep(5 * time.Second) // still down
	after := e.ztunnelUIDs("")
	for uid, node := range before {
		if after[uid] != node {
			t.Errorf("pod %s on %s changed while nodewise was down", uid, node)
		}
	}
	s := swap.Surger{Kube: e.c.Client}
	for _, node := range []string{"node-001", spec.Name, "node-002"} {
		res, err := s.Swap(ctx, ztunnelRef, node, time.Now().Add(time.Minute))
		if err != nil {
			t.Fatalf("%s: %v", node, err)
		}
		if node == spec.Name && res.Writes != 0 {
			t.Errorf("added node %s: %+v; want nothing to do", node, res)
		}
	}
	e.waitOldGone(hash)
	w.check(t)
	e.requireNoSurgeLeftovers()
}

// addNodeServedByDaemonSet adds a node (its kubelet stops at cleanup) and
// waits until the DaemonSet gives it a Ready ztunnel on hash.
func (e *env) addNodeServedByDaemonSet(hash string) cluster.NodeSpec {
	e.t.Helper()
	spec, stop, err := e.c.AddNode(context.Background(), nil)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(stop)
	e.waitFor(func(ctx context.Context) bool {
		p := e.ztunnelPodOrNil(spec.Name)
		return p != nil && podutils.IsPodReady(p) && p.Labels["controller-revision-hash"] == hash
	}, "the added node's ztunnel from the DaemonSet")
	return spec
}

// drainModel makes every ztunnel pod take d to exit after SIGTERM (the
// simulated kubelet's AnnotationStopAfter), as a draining ztunnel does.
func (e *env) drainModel(d time.Duration) {
	e.t.Helper()
	pods, err := e.c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=ztunnel"})
	if err != nil {
		e.t.Fatal(err)
	}
	patch := []byte(`{"metadata":{"annotations":{"` + cluster.AnnotationStopAfter + `":"` + d.String() + `"}}}`)
	for _, p := range pods.Items {
		if _, err := e.c.Client.CoreV1().Pods(ns).Patch(context.Background(), p.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
}

// slowStart makes the ztunnel template's pods start d after their creation.
func (e *env) slowStart(d time.Duration) {
	e.t.Helper()
	patch := []byte(`{"spec":{"template":{"metadata":{"annotations":{"` + cluster.AnnotationStartAfter + `":"` + d.String() + `"}}}}}`)
	if _, err := e.c.Client.AppsV1().DaemonSets(ns).Patch(context.Background(), cluster.ZtunnelName, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// surgeUntil runs a surge swap's steps on the node and stops (a crash)
// right after the named write.
func (e *env) surgeUntil(node, crashAfter string) {
	e.t.Helper()
	ctx := context.Background()
	s := swap.Surger{Kube: e.c.Client}
	e.waitFor(func(ctx context.Context) bool {
		in, err := swap.ObserveSurge(ctx, e.c.Client, ztunnelRef, node)
		if err != nil {
			return false
		}
		step := swap.NextSurgeStep(in)
		var res swap.SurgeResult
		switch {
		case step.Kind == swap.SurgeCreateBridge:
			if err := s.Apply(ctx, step, &res); err != nil {
				e.t.Fatal(err)
			}
			return crashAfter == "bridge created"
		case step.Kind == swap.SurgeRetire:
			if err := s.Apply(ctx, step, &res); err != nil {
				e.t.Fatal(err)
			}
			return crashAfter == "old pod deleted"
		}
		return false
	}, "surge on "+node+" until "+crashAfter)
	_ = ctx
}

// waitFor waits up to 2 minutes for cond (testkit.WaitFor), whose context
// ends with the wait.
func (e *env) waitFor(cond func(context.Context) bool, what string) {
	e.t.Helper()
	const timeout = 2 * time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	testkit.WaitFor(e.t, timeout, what, func() (bool, error) { return cond(ctx), nil })
}

// isZtunnel: the DaemonSet's pods and nodewise's bridges for it.
func isZtunnel(p *corev1.Pod) bool {
	return p.Labels["app"] == "ztunnel" || p.Labels[model.LabelSurgeBridge] == cluster.ZtunnelName
}

func (e *env) ztunnelPodOrNil(node string) *corev1.Pod {
	pods, err := e.c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil
	}
	var live []*corev1.Pod
	for i := range pods.Items {
		if p := &pods.Items[i]; isZtunnel(p) && p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	if len(live) != 1 {
		return nil
	}
	return live[0]
}

// ztunnelPod is the node's one live ztunnel pod (fails if there are more).
func (e *env) ztunnelPod(node string) *corev1.Pod {
	e.t.Helper()
	p := e.ztunnelPodOrNil(node)
	if p == nil {
		e.t.Fatalf("node %s has not exactly one live ztunnel pod", node)
	}
	return p
}

// ztunnelUIDs maps the UID of every live ztunnel pod not on skip to its node.
func (e *env) ztunnelUIDs(skip string) map[types.UID]string {
	e.t.Helper()
	pods, err := e.c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[types.UID]string{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if isZtunnel(p) && p.DeletionTimestamp == nil && p.Spec.NodeName != skip {
			out[p.UID] = p.Spec.NodeName
		}
	}
	return out
}

func mapsEqual(a, b map[types.UID]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// waitOldGone waits until every ztunnel pod (terminating ones included) is
// on hash and there is one per node.
func (e *env) waitOldGone(hash string) {
	e.t.Helper()
	e.waitFor(func(ctx context.Context) bool {
		pods, err := e.c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		perNode := map[string]int{}
		for i := range pods.Items {
			p := &pods.Items[i]
			if !isZtunnel(p) {
				continue
			}
			if p.Labels["controller-revision-hash"] != hash {
				return false
			}
			perNode[p.Spec.NodeName]++
		}
		for _, n := range perNode {
			if n != 1 {
				return false
			}
		}
		return len(perNode) == len(e.c.Nodes)
	}, "one ztunnel per node, all on "+hash)
}

// surgeLeftovers are pods of nodewise's not handed over: bridges whose
// controller is not the DaemonSet, and pods controlled by a ControllerRevision
// (an older nodewise's bridges).
func (e *env) surgeLeftovers() []*corev1.Pod {
	pods, err := e.c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return nil
	}
	var out []*corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		c := metav1.GetControllerOf(p)
		if _, bridge := p.Labels[model.LabelSurgeBridge]; (bridge && (c == nil || c.Kind != "DaemonSet")) || (c != nil && c.Kind == "ControllerRevision") {
			out = append(out, p)
		}
	}
	return out
}

func (e *env) requireNoSurgeLeftovers() {
	e.t.Helper()
	for _, p := range e.surgeLeftovers() {
		e.t.Errorf("left behind: pod %s on %s (labels %v, controller %v)", p.Name, p.Spec.NodeName, p.Labels, metav1.GetControllerOf(p))
	}
	for _, n := range e.c.Nodes {
		if e.ztunnelPodOrNil(n.Name) == nil {
			e.t.Errorf("node %s has not exactly one live ztunnel", n.Name)
		}
	}
}

// ztunnelWatch is an independent observer: it samples every 0.5 s whether
// each node has a Ready, non-terminating ztunnel (once it has had one), and
// watches pod events for who created which pod and when pods got Ready or
// were deleted.
type ztunnelWatch struct {
	mu        sync.Mutex
	seen      map[string]bool
	bare      []string // "node at time" with no Ready ztunnel
	samples   int
	readyAt   map[string]time.Time    // pod name → first seen Ready
	deletedAt map[types.UID]time.Time // pod UID → first seen terminating
	dsCreated int
	known     map[types.UID]bool
}

func (e *env) watchZtunnels(t *testing.T) *ztunnelWatch {
	t.Helper()
	w := &ztunnelWatch{seen: map[string]bool{}, readyAt: map[string]time.Time{}, deletedAt: map[types.UID]time.Time{}, known: map[types.UID]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	list, err := e.c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Items {
		w.known[p.UID] = true
	}
	wi, err := e.c.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for ev := range wi.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || !isZtunnel(p) {
				continue
			}
			w.mu.Lock()
			if ev.Type == watch.Added && !w.known[p.UID] {
				w.known[p.UID] = true
				if c := metav1.GetControllerOf(p); c != nil && c.Kind == "DaemonSet" {
					w.dsCreated++
				}
			}
			if _, ok := w.readyAt[p.Name]; !ok && podutils.IsPodReady(p) && p.DeletionTimestamp == nil {
				w.readyAt[p.Name] = time.Now()
			}
			if _, ok := w.deletedAt[p.UID]; !ok && (p.DeletionTimestamp != nil || ev.Type == watch.Deleted) {
				w.deletedAt[p.UID] = time.Now()
			}
			w.mu.Unlock()
		}
	}()
	go func() {
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			pods, err := e.c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				continue
			}
			ready := map[string]bool{}
			nodes := map[string]bool{}
			for i := range pods.Items {
				p := &pods.Items[i]
				if !isZtunnel(p) {
					continue
				}
				nodes[p.Spec.NodeName] = true
				if p.DeletionTimestamp == nil && podutils.IsPodReady(p) {
					ready[p.Spec.NodeName] = true
				}
			}
			w.mu.Lock()
			w.samples++
			for n := range ready {
				w.seen[n] = true
			}
			for n := range w.seen {
				if !ready[n] {
					w.bare = append(w.bare, n+" at "+time.Now().Format("15:04:05.0"))
				}
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *ztunnelWatch) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("watcher: %d samples every 0.5 s over %d nodes", w.samples, len(w.seen))
	if w.samples < 4 {
		t.Errorf("watcher took only %d samples", w.samples)
	}
	for _, b := range w.bare {
		t.Errorf("no Ready ztunnel on %s", b)
	}
}

func (w *ztunnelWatch) createdByDaemonSet() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dsCreated
}

// requireReadyBefore: the pod named ready was seen Ready before the pod
// with UID gone was seen terminating.
func (w *ztunnelWatch) requireReadyBefore(t *testing.T, ready string, gone types.UID) {
	t.Helper()
	var r, d time.Time
	for i := 0; i < 50; i++ {
		w.mu.Lock()
		r, d = w.readyAt[ready], w.deletedAt[gone]
		w.mu.Unlock()
		if !r.IsZero() && !d.IsZero() {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r.IsZero() || d.IsZero() || !r.Before(d) {
		t.Errorf("%s Ready at %s, pod %s deleted at %s; want Ready first", ready, r.Format("15:04:05.000"), gone, d.Format("15:04:05.000"))
	}
}

// TestSurgePolicyFencesOrchestratorPodWrites: with deploy/ applied, the
// orchestrator's ServiceAccount may create in istio-system only a bridge that
// copies the ztunnel DaemonSet's template and is controlled by a pod, and may
// patch no pod there; the swap's own writes (the bridge, the anchor's
// deletion with propagationPolicy Orphan) pass.
func TestSurgePolicyFencesOrchestratorPodWrites(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, 1)
	applyDeploy(t, e.c)
	ctx := context.Background()
	cfg := rest.CopyConfig(e.c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:nodewise-system:nodewise-orchestrator", Groups: []string{"system:serviceaccounts", "system:authenticated"}}
	as, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	in, err := swap.ObserveSurge(ctx, e.c.Client, ztunnelRef, "node-001")
	if err != nil {
		t.Fatal(err)
	}
	pods := as.CoreV1().Pods(ns)
	anchor := e.ztunnelPod("node-001")
	evil := swap.BridgePod(in.DaemonSet, in.Revision, "node-001", anchor)
	evil.Name += "-evil"
	evil.Spec.Containers[0].Image = "docker.io/attacker/rootkit:1"
	plain := swap.BridgePod(in.DaemonSet, in.Revision, "node-001", anchor)
	plain.Name += "-plain"
	delete(plain.Labels, model.LabelSurgeBridge)
	uncontrolled := swap.BridgePod(in.DaemonSet, in.Revision, "node-001", anchor)
	uncontrolled.Name += "-uncontrolled"
	uncontrolled.OwnerReferences = nil // the DaemonSet would adopt it at once, beside the old pod
	// A bridge naming a DaemonSet no binding of nodewise-surge-bridge-only
	// has (only ztunnel's do) would be checked against nothing.
	unbound := swap.BridgePod(in.DaemonSet, in.Revision, "node-001", anchor)
	unbound.Name += "-unbound"
	unbound.Labels[model.LabelSurgeBridge] = "istio-cni-node"
	var denied error
	// The policy reaches the admission chain within a few seconds.
	e.waitFor(func(ctx context.Context) bool {
		var made *corev1.Pod
		if made, denied = pods.Create(ctx, evil, metav1.CreateOptions{}); denied == nil {
			// Admitted before the policy was in place: take it back at once,
			// or the swap below would see it as a second older pod.
			zero := int64(0)
			_ = e.c.Client.CoreV1().Pods(ns).Delete(ctx, made.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		}
		return denied != nil && strings.Contains(denied.Error(), "copy of the ztunnel DaemonSet")
	}, "the policy to refuse a bridge with another image")
	for what, p := range map[string]*corev1.Pod{"a pod that is not a bridge": plain, "a bridge with no controller": uncontrolled, "a bridge for a DaemonSet that is not ztunnel's": unbound} {
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "only create surge bridge pods") {
			t.Errorf("creating %s: %v; want refused by the policy", what, err)
		}
	}
	bridge := swap.BridgePod(in.DaemonSet, in.Revision, "node-001", anchor)
	created, err := pods.Create(ctx, bridge, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the real bridge as the orchestrator: %v", err)
	}
	unown := []byte(`{"metadata":{"ownerReferences":null}}`)
	if _, err := pods.Patch(ctx, created.Name, types.MergePatchType, unown, metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("patching the bridge as the orchestrator: %v; want forbidden (it patches no pod)", err)
	}
	// The swap's own write passes: the anchor deleted with propagationPolicy
	// Orphan, and the cluster does the rest.
	e.waitFor(func(ctx context.Context) bool {
		p, err := e.c.Client.CoreV1().Pods(ns).Get(ctx, created.Name, metav1.GetOptions{})
		return err == nil && podutils.IsPodReady(p)
	}, "the bridge Ready")
	in, err = swap.ObserveSurge(ctx, e.c.Client, ztunnelRef, "node-001")
	if err != nil {
		t.Fatal(err)
	}
	step := swap.NextSurgeStep(in)
	if step.Kind != swap.SurgeRetire || !step.HandOver || len(step.Older) != 1 {
		t.Fatalf("step %s (%s); want the old pod retired and the bridge handed over", step.Kind, step.Reason)
	}
	var res swap.SurgeResult
	if err := (swap.Surger{Kube: as}).Apply(ctx, step, &res); err != nil {
		t.Fatalf("retiring the old pod and handing the bridge over as the orchestrator: %v", err)
	}
	if res.HandedOver != created.Name {
		t.Errorf("result %+v; want %s handed over", res, created.Name)
	}
	e.waitFor(func(ctx context.Context) bool {
		got, err := e.c.Client.CoreV1().Pods(ns).Get(ctx, created.Name, metav1.GetOptions{})
		c := metav1.GetControllerOf(got)
		return err == nil && c != nil && c.Kind == "DaemonSet"
	}, "the DaemonSet to adopt the bridge")
}
