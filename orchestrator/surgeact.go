package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// ErrSurgeTimeout is wrapped by the error Surger.Swap returns when the new
// pod is not Ready within the swap timeout (the caller halts the rollout; the
// old pod kept serving).
var ErrSurgeTimeout = errors.New("surge swap timed out")

// Surger acts the surge swap (surge.go) of one DaemonSet on one node through
// the API. It keeps no state between calls: every call reads the pods again.
type Surger struct {
	Kube kubernetes.Interface
	Log  *zap.Logger
	// Poll is how often Swap looks again while waiting (default 250 ms).
	Poll time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Observe, when set, reads the step's input (e.g. from informer caches)
	// instead of ObserveSurge's API reads.
	Observe func(ctx context.Context) (SurgeInput, error)
	// Changes, when set, returns a channel closed at the next change of what
	// Observe reads; Swap then waits on it (at most Poll) instead of polling.
	Changes func() <-chan struct{}
	// BridgeTimeout, when set, moves Swap's deadline to the bridge's creation
	// plus this, when that is later: once the node has its bridge, the swap's
	// clock runs from the bridge, which any process finds in the API (its
	// name is the node's and the revision's; the API server's clock, to the
	// second).
	BridgeTimeout time.Duration
}

// SurgeResult is what one Swap (or Abandon) did on the node.
type SurgeResult struct {
	// Bridge is the bridge pod created (or found already created) by this call.
	Bridge string
	// Retired are the older pods deleted, oldest first.
	Retired []string
	// HandedOver is the bridge handed to the DaemonSet controller.
	HandedOver string
	// Pod is the node's pod at the end (the DaemonSet's, Ready, newest).
	Pod string
	// Writes counts the API writes made (creates, deletes, patches).
	Writes int
	// expect are the last step's writes, as the next observation must show
	// them before Swap decides again.
	expect []expectation
}

func (s Surger) defaults() Surger {
	if s.Log == nil {
		s.Log = zap.NewNop()
	}
	if s.Poll <= 0 {
		s.Poll = 250 * time.Millisecond
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	return s
}

// ownWriteWait bounds how long Swap waits for its observation to show its
// own last writes before deciding again anyway (every write is idempotent;
// waiting only spares the repeats).
const ownWriteWait = 10 * time.Second

// controllerGrace is how long Swap gives the DaemonSet controller to act on
// a retire it made (adopt the handed-over bridge), even past the swap's
// deadline: a swap resumed late may retire a Ready bridge's older pods (the
// bridge is the newest ztunnel), and timing out right after, before the
// controller could adopt it, would halt a swap that is all but done.
const controllerGrace = 30 * time.Second

// surgeWaitOwnWrites: Swap waits for its observation to show the last
// step's writes (not a step NextSurgeStep returns).
const surgeWaitOwnWrites SurgeStepKind = "WaitOwnWrites"

// errUnsettled: the DaemonSet controller has not observed the current
// template yet, so its newest ControllerRevision is not known.
var errUnsettled = errors.New("the DaemonSet controller has not observed the current template yet")

// ObserveSurge reads what NextSurgeStep decides from, straight from the API:
// the DaemonSet, its newest ControllerRevision (by owner UID) and the pods
// bound to the node in its namespace.
func ObserveSurge(ctx context.Context, kube kubernetes.Interface, ref v1alpha1.TargetRef, node string) (SurgeInput, error) {
	ds, err := kube.AppsV1().DaemonSets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		return SurgeInput{Node: node}, fmt.Errorf("reading DaemonSet %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	revs, err := kube.AppsV1().ControllerRevisions(ref.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return SurgeInput{Node: node}, fmt.Errorf("listing ControllerRevisions in %s: %w", ref.Namespace, err)
	}
	pods, err := kube.CoreV1().Pods(ref.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		return SurgeInput{Node: node}, fmt.Errorf("listing pods on node %s in %s: %w", node, ref.Namespace, err)
	}
	rs := make([]*appsv1.ControllerRevision, len(revs.Items))
	for i := range revs.Items {
		rs[i] = &revs.Items[i]
	}
	ps := make([]*corev1.Pod, len(pods.Items))
	for i := range pods.Items {
		ps[i] = &pods.Items[i]
	}
	return surgeInput(ds, rs, ps, node)
}

// surgeInput assembles a SurgeInput from what was read (from the API or from
// informer caches): it needs the DaemonSet settled (the controller has
// observed its template, so the newest ControllerRevision is its template's).
func surgeInput(ds *appsv1.DaemonSet, revs []*appsv1.ControllerRevision, pods []*corev1.Pod, node string) (SurgeInput, error) {
	in := SurgeInput{Node: node}
	if ds.Status.ObservedGeneration < ds.Generation {
		return in, fmt.Errorf("DaemonSet %s/%s: %w", ds.Namespace, ds.Name, errUnsettled)
	}
	var newest *appsv1.ControllerRevision
	for _, r := range revs {
		if metav1.IsControlledBy(r, ds) && (newest == nil || r.Revision > newest.Revision) {
			newest = r
		}
	}
	if newest == nil {
		return in, fmt.Errorf("DaemonSet %s/%s has no ControllerRevision yet", ds.Namespace, ds.Name)
	}
	in.DaemonSet, in.Revision = ds, newest
	for _, p := range pods {
		if p.Spec.NodeName == node {
			in.Pods = append(in.Pods, p)
		}
	}
	return in, nil
}

// Apply acts one step. Every write is idempotent: a create finds the bridge
// already there, deletes carry the pod's UID as a precondition, and the
// hand-over patch tests the UIDs it removes, so a step repeated from a stale
// view or after a crash changes nothing twice. A write the step's input
// already shows done (the hand-over finalizer on an older pod) is skipped.
// What the step wrote is added to res.expect, for Swap to wait for.
func (s Surger) Apply(ctx context.Context, step SurgeStep, res *SurgeResult) error {
	s = s.defaults()
	switch step.Kind {
	case SurgeCreateBridge:
		b := step.Bridge
		_, err := s.Kube.CoreV1().Pods(b.Namespace).Create(ctx, b, metav1.CreateOptions{FieldManager: FieldManager})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating surge bridge %s/%s on %s: %w", b.Namespace, b.Name, b.Spec.NodeName, err)
		}
		res.Bridge = b.Name
		res.Writes++
		res.expect = append(res.expect, expectation{name: b.Name, want: func(p *corev1.Pod) bool { return p != nil }})
		if err == nil {
			s.Log.Info("surge bridge created", zap.String("pod", b.Namespace+"/"+b.Name), zap.String("node", b.Spec.NodeName),
				zap.String("revision", b.Labels[LabelControllerRevisionHash]))
		}
	case SurgeRetire:
		// When the bridge is to be handed over, the DaemonSet's older pods
		// are held in the API (a finalizer) from their deletion until the
		// hand-over: while one of its pods terminates on the node, the
		// DaemonSet (OnDelete) creates none there, so it never gets two.
		var holding []*corev1.Pod // the DaemonSet's pods this call deleted with the finalizer on
		for _, p := range step.Older {
			hold := step.HandOver && controlledBy(p, step.DaemonSetUID)
			if hold && !hasFinalizer(p, FinalizerSurgeHandOver) {
				found, err := s.finalizer(ctx, p, true)
				if err != nil {
					return err
				}
				res.Writes++
				hold = found
			}
			gone, err := s.deletePod(ctx, p, "older pod deleted beside a Ready one")
			if err != nil {
				return err
			}
			res.Retired = append(res.Retired, p.Name)
			res.Writes++
			res.expect = append(res.expect, expectGone(p))
			if hold && !gone {
				holding = append(holding, p)
			}
		}
		if step.HandOver {
			// A pod of the DaemonSet is terminating on the node for as long
			// as the finalizer holds it, and only nodewise removes that, after
			// the hand-over (a hand-over repeated from a stale view fails its
			// test): so a held pod, known from this call's own writes or from
			// the step's input, needs no read. Only a pod deleted without
			// the finalizer (by someone else) is read back from the API, as
			// a cache may lag its going.
			held := append(holding, step.Held...)
			if len(held) == 0 {
				ok, err := s.daemonPodTerminating(ctx, step.Pod.Namespace, step.Pod.Spec.NodeName, step.DaemonSetUID)
				if err != nil {
					return err
				}
				if !ok {
					// The old pod is already gone (deleted by someone else, or
					// while nodewise was down), so the DaemonSet is creating its
					// own pod on the node: a hand-over now would give it two and
					// it would prune the newer. Its pod, once Ready, retires the
					// bridge instead.
					s.Log.Debug("older pod already gone: hand-over deferred", zap.String("pod", step.Pod.Name))
					return nil
				}
			}
			if err := s.handOver(ctx, step.Pod); err != nil {
				return err
			}
			res.HandedOver = step.Pod.Name
			res.Writes++
			res.expect = append(res.expect, expectation{name: step.Pod.Name, uid: step.Pod.UID,
				want: func(p *corev1.Pod) bool { return p == nil || controllerKind(p) != "ControllerRevision" }})
			for _, p := range held {
				if err := s.release(ctx, p, res); err != nil {
					return err
				}
			}
		}
	case SurgeRelease:
		for _, p := range step.Older {
			if err := s.release(ctx, p, res); err != nil {
				return err
			}
		}
	}
	return nil
}

// release removes FinalizerSurgeHandOver from a held pod.
func (s Surger) release(ctx context.Context, p *corev1.Pod, res *SurgeResult) error {
	if _, err := s.finalizer(ctx, p, false); err != nil {
		return err
	}
	res.Writes++
	res.expect = append(res.expect, expectation{name: p.Name, uid: p.UID,
		want: func(p *corev1.Pod) bool { return p == nil || !hasFinalizer(p, FinalizerSurgeHandOver) }})
	return nil
}

// expectation is one of a step's writes as the step's next input must show
// it: want is called with the pod of that name (and UID, when set), nil
// when there is none.
type expectation struct {
	name string
	uid  types.UID
	want func(*corev1.Pod) bool
}

func expectGone(p *corev1.Pod) expectation {
	return expectation{name: p.Name, uid: p.UID, want: func(p *corev1.Pod) bool { return p == nil || p.DeletionTimestamp != nil }}
}

// shows reports whether in shows every write expected (see Swap).
func shows(in SurgeInput, expect []expectation) bool {
	for _, x := range expect {
		var match *corev1.Pod
		for _, p := range in.Pods {
			if p.Name == x.name && (x.uid == "" || p.UID == x.uid) {
				match = p
				break
			}
		}
		if !x.want(match) {
			return false
		}
	}
	return true
}

// finalizer adds (or removes) FinalizerSurgeHandOver on a pod, leaving its
// other finalizers alone (a strategic merge of the list). found is false
// when the pod is gone.
func (s Surger) finalizer(ctx context.Context, p *corev1.Pod, add bool) (found bool, err error) {
	patch, verb := fmt.Sprintf(`{"metadata":{"finalizers":[%q]}}`, FinalizerSurgeHandOver), "adding"
	if !add {
		patch, verb = fmt.Sprintf(`{"metadata":{"$deleteFromPrimitiveList/finalizers":[%q]}}`, FinalizerSurgeHandOver), "removing"
	}
	out, err := s.Kube.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: FieldManager})
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("%s the surge hand-over finalizer on pod %s/%s: %w", verb, p.Namespace, p.Name, err)
	}
	return out.UID == p.UID, nil
}

// deletePod deletes p (by UID); gone is whether it was no longer there.
func (s Surger) deletePod(ctx context.Context, p *corev1.Pod, why string) (gone bool, err error) {
	uid := p.UID
	err = s.Kube.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return false, fmt.Errorf("deleting pod %s/%s on %s: %w", p.Namespace, p.Name, p.Spec.NodeName, err)
	}
	s.Log.Info(why, zap.String("pod", p.Namespace+"/"+p.Name), zap.String("node", p.Spec.NodeName),
		zap.String("revision", p.Labels[LabelControllerRevisionHash]))
	return err != nil, nil
}

// daemonPodTerminating reports, from the API (not a cache), whether a pod
// of the DaemonSet is terminating on the node: then the DaemonSet
// controller, which saw its deletion before it sees the hand-over, counts no
// running pod but the bridge once it is handed over, and creates none. Only
// asked for a pod deleted without the hand-over finalizer.
func (s Surger) daemonPodTerminating(ctx context.Context, namespace, node string, ds types.UID) (bool, error) {
	pods, err := s.Kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		return false, fmt.Errorf("listing pods on node %s in %s: %w", node, namespace, err)
	}
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp != nil && controlledBy(p, ds) {
			return true, nil
		}
	}
	return false, nil
}

// handOver removes the bridge's controller reference and bridge label, so the
// DaemonSet controller adopts it. It is only called after the older pods'
// deletions were committed: the DaemonSet controller's watch delivers them
// first, so it never sees two running pods on the node and prunes none.
func (s Surger) handOver(ctx context.Context, p *corev1.Pod) error {
	c := metav1.GetControllerOf(p)
	if c == nil {
		return nil
	}
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/uid", "value": p.UID},
		{"op": "test", "path": "/metadata/ownerReferences/0/uid", "value": c.UID},
		{"op": "remove", "path": "/metadata/ownerReferences"},
		{"op": "remove", "path": "/metadata/labels/" + strings.ReplaceAll(LabelSurgeBridge, "/", "~1")},
	})
	if err != nil {
		return err
	}
	_, err = s.Kube.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	switch {
	case err == nil:
		s.Log.Info("surge bridge handed over to the DaemonSet", zap.String("pod", p.Namespace+"/"+p.Name), zap.String("node", p.Spec.NodeName))
		return nil
	case apierrors.IsNotFound(err), apierrors.IsInvalid(err), statusCode(err) == 422:
		// Gone, or already handed over (a test failed): the next look decides.
		return nil
	}
	return fmt.Errorf("handing surge bridge %s/%s over to the DaemonSet: %w", p.Namespace, p.Name, err)
}

// Swap drives one node's surge swap until the node's only live pod is the
// DaemonSet's, Ready on the newest revision. deadline bounds the wait for a
// new pod to be Ready (the caller counts it from its persisted step start,
// so a restart does not extend it): past it, never-Ready bridges are deleted
// and an error wrapping ErrSurgeTimeout says why; the old pod kept serving.
func (s Surger) Swap(ctx context.Context, ref v1alpha1.TargetRef, node string, deadline time.Time) (SurgeResult, error) {
	s = s.defaults()
	var res SurgeResult
	var acted time.Time  // when the last step's writes were made
	var settle time.Time // until when the DaemonSet controller is given to act on a retire
	for {
		var changed <-chan struct{}
		if s.Changes != nil {
			changed = s.Changes()
		}
		in, err := s.observe(ctx, ref, node)
		var step SurgeStep
		switch {
		case errors.Is(err, errUnsettled):
			step = SurgeStep{Kind: SurgeWaitController, Reason: err.Error()}
		case err != nil:
			return res, err
		case len(res.expect) > 0 && !shows(in, res.expect) && s.Now().Sub(acted) < ownWriteWait:
			// The input (a cache) does not show this loop's own last writes
			// yet: deciding from it would repeat them.
			step = SurgeStep{Kind: surgeWaitOwnWrites, Reason: "waiting for the cache to show this swap's last writes"}
		default:
			res.expect = nil
			step = NextSurgeStep(in)
		}
		s.Log.Debug("surge step", zap.String("node", node), zap.String("step", string(step.Kind)), zap.String("reason", step.Reason))
		switch step.Kind {
		case SurgeDone:
			res.Pod = step.Pod.Name
			return res, nil
		case SurgeRetire, SurgeCreateBridge, SurgeRelease:
			// Acted: look again once the change shows (a Ready bridge is
			// retired past the deadline too: it is the newest ztunnel).
			if err := s.Apply(ctx, step, &res); err != nil {
				return res, err
			}
			acted = s.Now()
			if step.Kind != SurgeCreateBridge {
				settle = acted.Add(controllerGrace)
			}
		case surgeWaitOwnWrites:
		default:
			if !s.Now().Before(s.deadline(in, node, deadline)) && !s.Now().Before(settle) {
				gone, err := s.abandon(ctx, in, &res)
				if err != nil {
					return res, err
				}
				why := step.Reason
				if len(gone) > 0 {
					why += "; deleted the never-Ready bridge " + strings.Join(gone, ", ") + ", the older pod keeps serving"
				}
				return res, fmt.Errorf("%s/%s on %s: %w: %s", ref.Namespace, ref.Name, node, ErrSurgeTimeout, why)
			}
		}
		wake := time.NewTimer(s.Poll)
		select {
		case <-ctx.Done():
			wake.Stop()
			return res, ctx.Err()
		case <-changed:
		case <-wake.C:
		}
		wake.Stop()
	}
}

// deadline is Swap's deadline for this input: the caller's, or the bridge's
// creation plus BridgeTimeout when that is later.
func (s Surger) deadline(in SurgeInput, node string, deadline time.Time) time.Time {
	if s.BridgeTimeout <= 0 || in.DaemonSet == nil || in.Revision == nil {
		return deadline
	}
	name := BridgeName(in.DaemonSet, in.Revision, node)
	for _, p := range in.Pods {
		if p.Name == name {
			if t := p.CreationTimestamp.Add(s.BridgeTimeout); t.After(deadline) {
				return t
			}
		}
	}
	return deadline
}

func (s Surger) observe(ctx context.Context, ref v1alpha1.TargetRef, node string) (SurgeInput, error) {
	if s.Observe != nil {
		return s.Observe(ctx)
	}
	return ObserveSurge(ctx, s.Kube, ref, node)
}

// Abandon removes what an abandoned surge swap must not leave behind (the
// node's never-Ready bridges, see SurgeLeftovers). A Ready bridge stays: it is
// the newest ztunnel; finish the swap with Swap instead.
func (s Surger) Abandon(ctx context.Context, ref v1alpha1.TargetRef, node string) (SurgeResult, error) {
	s = s.defaults()
	var res SurgeResult
	in, err := s.observe(ctx, ref, node)
	if err != nil {
		return res, err
	}
	_, err = s.abandon(ctx, in, &res)
	return res, err
}

func (s Surger) abandon(ctx context.Context, in SurgeInput, res *SurgeResult) ([]string, error) {
	if in.DaemonSet == nil {
		return nil, nil
	}
	var gone []string
	for _, p := range SurgeLeftovers(in) {
		if _, err := s.deletePod(ctx, p, "never-Ready surge bridge deleted"); err != nil {
			return gone, err
		}
		gone = append(gone, p.Name)
		res.Writes++
	}
	return gone, nil
}

func statusCode(err error) int32 {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return se.Status().Code
	}
	return 0
}
