package swap

import (
	"context"
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
	"github.com/nodewise/nodewise/orchestrator/model"
)

// ErrSurgeTimeout is wrapped by the error Surger.Swap returns when the new
// pod is not Ready within the swap timeout (the caller halts the rollout; the
// old pod kept serving).
var ErrSurgeTimeout = errors.New("surge swap timed out")

// ErrSurgeBridgeFailed is wrapped by the error Surger.Swap returns when the
// node's bridge is phase Failed (the kubelet rejected it: OutOfcpu, …): the
// failed bridge is deleted, the old pod kept serving, and the caller halts.
var ErrSurgeBridgeFailed = errors.New("surge bridge failed")

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
	// Recreate, when set (with BridgeTimeout, the swap timeout), deletes a
	// bridge still not Ready half way through the swap timeout, once per
	// attempt (its deadline), and creates it again: the wait for the next
	// ends where the first's would have.
	Recreate *Recreate
}

// SurgeResult is what one Swap (or Abandon) did on the node.
type SurgeResult struct {
	// Bridge is the bridge pod created (or found already created) by this call.
	Bridge string
	// Retired are the older pods deleted, oldest first.
	Retired []string
	// HandedOver is the bridge handed to the DaemonSet controller (by its
	// anchor's deletion).
	HandedOver string
	// Pod is the node's pod at the end (the DaemonSet's, Ready, newest).
	Pod string
	// Writes counts the API writes made (creates and deletes: a surge swap
	// patches nothing).
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

// controllerGrace is how long Swap gives the cluster's controllers to act on
// a retire it made (the garbage collector hand the bridge over, the
// DaemonSet controller adopt it), even past the swap's
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
	return InputOf(ds, rs, ps, node)
}

// InputOf assembles a SurgeInput from what was read (from the API or from
// informer caches): it needs the DaemonSet settled (the controller has
// observed its template, so the newest ControllerRevision is its template's).
func InputOf(ds *appsv1.DaemonSet, revs []*appsv1.ControllerRevision, pods []*corev1.Pod, node string) (SurgeInput, error) {
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
// already there and deletes carry the pod's UID as a precondition, so a step
// repeated from a stale view or after a crash changes nothing twice. What the
// step wrote is added to res.expect, for Swap to wait for.
func (s Surger) Apply(ctx context.Context, step SurgeStep, res *SurgeResult) error {
	s = s.defaults()
	switch step.Kind {
	case SurgeCreateBridge:
		b := step.Bridge
		_, err := s.Kube.CoreV1().Pods(b.Namespace).Create(ctx, b, metav1.CreateOptions{FieldManager: model.FieldManager})
		if apierrors.IsAlreadyExists(err) {
			// The name is the node's and the revision's: what holds it is
			// this swap's bridge, unless the view this step was decided
			// from missed that it failed.
			if got, gerr := s.Kube.CoreV1().Pods(b.Namespace).Get(ctx, b.Name, metav1.GetOptions{}); gerr == nil && got.Status.Phase == corev1.PodFailed && got.DeletionTimestamp == nil {
				if err := s.deletePod(ctx, got, false, "failed surge bridge deleted"); err != nil {
					return err
				}
				res.Writes++
				return fmt.Errorf("%w: %s/%s on %s: %s; deleted it, the older pod keeps serving", ErrSurgeBridgeFailed, b.Namespace, b.Name, b.Spec.NodeName, podFailure(got))
			}
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating surge bridge %s/%s on %s: %w", b.Namespace, b.Name, b.Spec.NodeName, err)
		}
		res.Bridge = b.Name
		res.Writes++
		res.expect = append(res.expect, expectation{name: b.Name, want: func(p *corev1.Pod) bool { return p != nil }})
		if err == nil {
			s.Log.Info("surge bridge created", zap.String("pod", b.Namespace+"/"+b.Name), zap.String("node", b.Spec.NodeName),
				zap.String("revision", b.Labels[model.LabelControllerRevisionHash]), zap.String("anchor", step.Anchor.Name))
		}
	case SurgeRetire:
		for i, p := range step.Older {
			why, orphan := "older pod deleted beside a Ready one", false
			if step.HandOver && i == len(step.Older)-1 {
				// The anchor: deleted with propagationPolicy Orphan, so the
				// garbage collector hands the bridge over before the anchor
				// goes (the API server adds the orphan finalizer in the same
				// write that marks it terminating).
				why, orphan = "older pod deleted beside a Ready one, handing its bridge over", true
			}
			if err := s.deletePod(ctx, p, orphan, why); err != nil {
				return err
			}
			res.Retired = append(res.Retired, p.Name)
			res.Writes++
			res.expect = append(res.expect, expectGone(p))
			if orphan {
				res.HandedOver = step.Pod.Name
			}
		}
	}
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

// deletePod deletes p (by UID), with propagationPolicy Orphan when orphan is
// set (the anchor of a bridge). A pod already gone, or replaced by another of
// its name, is not an error.
func (s Surger) deletePod(ctx context.Context, p *corev1.Pod, orphan bool, why string) error {
	uid := p.UID
	opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}
	if orphan {
		policy := metav1.DeletePropagationOrphan
		opts.PropagationPolicy = &policy
	}
	err := s.Kube.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, opts)
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting pod %s/%s on %s: %w", p.Namespace, p.Name, p.Spec.NodeName, err)
	}
	s.Log.Info(why, zap.String("pod", p.Namespace+"/"+p.Name), zap.String("node", p.Spec.NodeName),
		zap.String("revision", p.Labels[model.LabelControllerRevisionHash]))
	return nil
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
	var recreated *Recreated
	checked := false // recreated is read (or made) for this attempt
	until := func(in SurgeInput) time.Time {
		d := s.deadline(in, node, deadline)
		if recreated != nil && recreated.Until.Before(d) {
			d = recreated.Until
		}
		return d
	}
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
		case SurgeRetire, SurgeCreateBridge:
			// Acted: look again once the change shows (a Ready bridge is
			// retired past the deadline too: it is the newest ztunnel). A
			// bridge this loop already created, decided again past the
			// deadline, times out like any wait: a create never counts as
			// progress by itself.
			if step.Kind == SurgeCreateBridge && res.Bridge == step.Bridge.Name && !s.Now().Before(until(in)) {
				gone, err := s.abandon(ctx, in, &res)
				if err != nil {
					return res, err
				}
				return res, fmt.Errorf("%s/%s on %s: %w: bridge %s created but never seen live (%d leftover(s) deleted), the older pod keeps serving%s", ref.Namespace, ref.Name, node, ErrSurgeTimeout, step.Bridge.Name, len(gone), recreated.tries())
			}
			if err := s.Apply(ctx, step, &res); err != nil {
				return res, err
			}
			acted = s.Now()
			if step.Kind != SurgeCreateBridge {
				settle = acted.Add(controllerGrace)
			}
		case SurgeBridgeFailed:
			// The kubelet rejected the bridge: a create would only find it
			// again. It goes (a leftover), the old pod keeps serving.
			if _, err := s.abandon(ctx, in, &res); err != nil {
				return res, err
			}
			return res, fmt.Errorf("%s/%s on %s: %w: %s; deleted it, the older pod keeps serving", ref.Namespace, ref.Name, node, ErrSurgeBridgeFailed, step.Reason)
		case surgeWaitOwnWrites:
		default:
			if step.Kind == SurgeWaitReady && !checked && s.Recreate != nil && s.BridgeTimeout > 0 && isBridge(step.Pod, in.DaemonSet) &&
				!s.Now().Before(recreateDue(until(in), s.BridgeTimeout)) {
				// Stuck half way: recreate it once (Recreate), unless this
				// attempt did already (another leader may have).
				checked = true
				if recreated, err = s.Recreate.Done(ctx, ref.Name, node, deadline); err != nil {
					return res, err
				}
				if (recreated == nil || recreated.UID == step.Pod.UID) && s.Now().Before(until(in)) {
					if recreated, err = s.Recreate.Once(ctx, ref, node, step.Pod, deadline, until(in)); err != nil {
						return res, err
					}
					res.Writes++
					res.expect, acted = append(res.expect, expectGone(step.Pod)), s.Now()
					break
				}
			}
			if !s.Now().Before(until(in)) && !s.Now().Before(settle) {
				gone, err := s.abandon(ctx, in, &res)
				if err != nil {
					return res, err
				}
				why := step.Reason
				if len(gone) > 0 {
					why += "; deleted the never-Ready bridge " + strings.Join(gone, ", ") + ", the older pod keeps serving"
				}
				why += recreated.tries()
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
		if err := s.deletePod(ctx, p, false, "never-Ready surge bridge deleted"); err != nil {
			return gone, err
		}
		gone = append(gone, p.Name)
		res.Writes++
	}
	return gone, nil
}
