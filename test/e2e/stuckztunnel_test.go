package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/swap"
	"github.com/nodewise/nodewise/sim/cluster"
)

// stuckCNI is the simulated kubelet's runtime on a node where istio-cni
// answers 500 to a fresh ztunnel (istio/istio#61374, ztunnel#1674): the
// first `times` ztunnel pods of image tag `tag` on the first node that gets
// one never start (the sandbox fails, the pod stays Pending in
// ContainerCreating, never Ready), as long as they live; the pods after them
// start. It records every such pod it was asked to start.
type stuckCNI struct {
	tag   string
	times int

	mu    sync.Mutex
	node  string
	stuck []types.UID        // the pods it keeps from starting, in order
	fresh map[types.UID]bool // every ztunnel pod of tag on node it saw
}

var errCNI500 = errors.New(`plugin type="istio-cni" name="istio-cni" failed (add): failed to add to ztunnel: 500 Internal Server Error (simulated)`)

func (s *stuckCNI) Start(_ context.Context, pod *corev1.Pod, _ string) error {
	if pod.Labels["app"] != "ztunnel" || len(pod.Spec.Containers) == 0 || !strings.HasSuffix(pod.Spec.Containers[0].Image, ":"+s.tag) {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.node == "" {
		s.node = pod.Spec.NodeName
	}
	if pod.Spec.NodeName != s.node {
		return nil
	}
	if s.fresh == nil {
		s.fresh = map[types.UID]bool{}
	}
	s.fresh[pod.UID] = true
	for _, uid := range s.stuck {
		if uid == pod.UID {
			return errCNI500
		}
	}
	if len(s.stuck) < s.times {
		s.stuck = append(s.stuck, pod.UID)
		return errCNI500
	}
	return nil
}

func (s *stuckCNI) Stop(context.Context, *corev1.Pod) {}

func (s *stuckCNI) seen() (node string, stuck []types.UID, fresh int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.node, append([]types.UID(nil), s.stuck...), len(s.fresh)
}

// recreatedRecord is the node's record of the swap's recreate, as written.
func (e *env) recreatedRecord(node string) (map[string]any, bool) {
	e.t.Helper()
	n, err := e.c.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	v, ok := n.Annotations[swap.AnnotationRecreatedPrefix+cluster.ZtunnelName]
	if !ok {
		return nil, false
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(v), &rec); err != nil {
		e.t.Fatalf("node %s: %s is not JSON: %v", node, v, err)
	}
	return rec, true
}

// recreateEvents are the Events saying a new pod was recreated, by the kind
// of object they are on.
func (e *env) recreateEvents() map[string]string {
	e.t.Helper()
	evs, err := e.c.Client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]string{}
	for _, ev := range evs.Items {
		if ev.Reason == swap.EventNewPodRecreated {
			out[ev.InvolvedObject.Kind] = ev.Message
		}
	}
	return out
}

// TestStuckZtunnelRecreatedOnce: issue 48 defect 9. The first new ztunnel
// on a node is stuck not Ready (istio-cni answers 500 to it); nodewise
// deletes it once, past half the swap timeout, and its successor, Ready,
// completes the node and the rollout. The node records the recreate and
// Events say so, on the node and on the rollout. Both ways of swapping
// ztunnel: surge (nodewise's bridge is made again) and replace (the
// DaemonSet controller makes the next pod).
func TestStuckZtunnelRecreatedOnce(t *testing.T) {
	for _, kind := range []model.SwapKind{model.SwapSurge, model.SwapReplace} {
		t.Run(string(kind), func(t *testing.T) {
			rt := &stuckCNI{tag: "1.28.1", times: 1}
			e := newEnvWith(t, cluster.Options{Nodes: 2, Zones: 1, Runtime: rt})
			e.upgrade("1.28.1")
			e.runInProcessWith("stuck-once", func(c *orchestrator.Config) { c.ZtunnelSwap = kind })
			const swapTimeout = 16 * time.Second
			name := "stuck-once-" + string(kind)
			e.apply(rollout(name, func(s *v1alpha1.NodeRolloutSpec) {
				s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
				s.SwapTimeout = &v1alpha1.Duration{Duration: swapTimeout}
			}))
			nr := e.waitPhase(name, 3*time.Minute, v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted)
			node, stuck, fresh := rt.seen()
			if nr.Status.Phase != v1alpha1.PhaseCompleted {
				t.Fatalf("phase %s, halt reason %q (stuck pods on %s: %v); want Completed after one recreate", nr.Status.Phase, nr.Status.HaltReason, node, stuck)
			}
			if len(stuck) != 1 || fresh != 2 {
				t.Errorf("node %s: %d pods kept stuck, %d fresh ztunnel pods; want the stuck one and one successor", node, len(stuck), fresh)
			}
			e.assertAllOnNewest(2)
			rec, ok := e.recreatedRecord(node)
			if !ok || rec["uid"] != string(stuck[0]) {
				t.Errorf("node %s's record of the recreate: %v (present %v); want it naming the stuck pod %s", node, rec, ok, stuck[0])
			}
			var evs map[string]string
			_ = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
				evs = e.recreateEvents()
				return len(evs) == 2, nil
			})
			for _, kind := range []string{"Node", "NodeRollout"} {
				if !strings.Contains(evs[kind], "the new ztunnel was stuck not Ready; recreated it once") {
					t.Errorf("%s Event %q; want it saying the new ztunnel was recreated once", kind, evs[kind])
				}
			}
		})
	}
}

// TestStuckZtunnelTwiceHaltsAcrossHandover: issue 48 defect 9. Every new
// ztunnel on the node is stuck: the leader recreates the first one once,
// then hands over (it stops right after the node records the recreate);
// the successor does not recreate again: it halts the rollout within the
// swap timeout, with a reason naming both tries, and only two new pods were
// ever made on the node.
func TestStuckZtunnelTwiceHaltsAcrossHandover(t *testing.T) {
	rt := &stuckCNI{tag: "1.28.1", times: 100}
	e := newEnvWith(t, cluster.Options{Nodes: 2, Zones: 1, Runtime: rt})
	e.upgrade("1.28.1")
	stopFirst, _ := e.runInProcess("stuck-first")
	const swapTimeout, name = 20 * time.Second, "stuck-twice"
	e.apply(rollout(name, func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
		s.SwapTimeout = &v1alpha1.Duration{Duration: swapTimeout}
	}))
	e.waitFor(func(context.Context) bool {
		node, _, _ := rt.seen()
		if node == "" {
			return false
		}
		_, ok := e.recreatedRecord(node)
		return ok
	}, "the node's record of the recreate")
	stopFirst()
	e.runInProcess("stuck-second")
	nr := e.waitPhase(name, 2*time.Minute, v1alpha1.PhaseHalted, v1alpha1.PhaseCompleted)
	node, stuck, fresh := rt.seen()
	if nr.Status.Phase != v1alpha1.PhaseHalted {
		t.Fatalf("phase %s; want Halted: every new ztunnel on %s is stuck", nr.Status.Phase, node)
	}
	if len(stuck) != 2 || fresh != 2 {
		t.Errorf("node %s: %d new ztunnel pods made (%v); want two: the first and one recreate, none after the handover", node, fresh, stuck)
	}
	r := nr.Status.HaltReason
	for _, want := range []string{"swap timeout", "not Ready", "ContainerCreating", "recreated once", string(stuck[0])} {
		if !strings.Contains(r, want) {
			t.Errorf("halt reason %q lacks %q (it names both tries: the recreated pod and its successor)", r, want)
		}
	}
	for _, ns := range nr.Status.Nodes {
		if ns.Name == node && ns.State == v1alpha1.NodeFailed && ns.StartTime != nil {
			if took := ns.StateSince.Sub(ns.StartTime.Time); took > swapTimeout+10*time.Second {
				t.Errorf("node %s halted %s after it started; swap timeout %s (a recreate does not extend it)", node, took, swapTimeout)
			}
		}
	}
	e.waitFor(func(ctx context.Context) bool { return len(e.surgeLeftovers()) == 0 }, "the never-Ready bridge gone")
	if p := e.ztunnelPodOrNil(node); p == nil || !strings.HasSuffix(p.Spec.Containers[0].Image, ":1.27.3") {
		t.Errorf("halted node %s: ztunnel %v; want the old 1.27.3 pod still serving", node, p)
	}
}
