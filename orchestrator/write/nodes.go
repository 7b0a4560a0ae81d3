package write

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"

	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/observe"
)

// Nodes writes nodes: the step records (annotations) and the cordon, each
// patch conditional on the resourceVersion it read where a racing write
// would matter. It remembers the Node each of its patches returned, newer
// than the cache until the watch catches up (Newest).
type Nodes struct {
	Kube     kubernetes.Interface
	Cache    corelisters.NodeLister
	Changes  *observe.Changes // wakes read's wait for the cache to catch up
	Now      func() time.Time
	Log      *zap.Logger
	Recorder record.EventRecorder

	mu sync.Mutex
	// written is the Node object the API returned to this process's last
	// patch of it, by name: at least as new as anything this process wrote.
	written map[string]*corev1.Node
	// older holds, by node, the resourceVersions this process knows to be
	// older than written (each patch's precondition and the copy it
	// replaced), until the cache shows written's own version.
	older map[string]map[string]bool
}

// ConflictBackoff retries 409s for a few seconds: the leader is the only
// writer of status, so conflicts come from users editing spec.
var ConflictBackoff = wait.Backoff{Steps: 12, Duration: 20 * time.Millisecond, Factor: 1.6, Jitter: 0.2, Cap: 2 * time.Second}

// onConflict runs fn again on a 409, with ConflictBackoff. When fn stopped
// because ctx ended, the caller is told so: retry.OnError would answer the
// last 409 instead (it takes a context's end for a backoff that ran out).
func onConflict(ctx context.Context, fn func() error) error {
	err := retry.OnError(ConflictBackoff, apierrors.IsConflict, fn)
	if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		return fmt.Errorf("%w (after %w)", context.Cause(ctx), err)
	}
	return err
}

// Patch merge-patches a node's annotations (nil value = delete) and,
// when unschedulable is set, spec.unschedulable. With rv set the patch is
// conditional on that resourceVersion, so a racing write returns 409. It
// returns the node's record as the API answered.
func (w *Nodes) Patch(ctx context.Context, node, rv string, ann map[string]*string, unschedulable *bool) (nodestep.Record, error) {
	meta := map[string]any{"annotations": ann}
	if rv != "" {
		meta["resourceVersion"] = rv
	}
	body := map[string]any{"metadata": meta}
	if unschedulable != nil {
		body["spec"] = map[string]any{"unschedulable": *unschedulable}
	}
	data, err := json.Marshal(body)
	if err != nil {
		return nodestep.Record{}, fmt.Errorf("encoding node patch: %w", err)
	}
	out, err := w.Kube.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, data, metav1.PatchOptions{FieldManager: model.FieldManager})
	if err != nil {
		return nodestep.Record{}, fmt.Errorf("patching node %s: %w", node, err)
	}
	w.Remember(node, rv, out)
	return nodestep.ParseRecord(out.Annotations), nil
}

// Remember keeps out, what the API returned to a patch of the node
// conditional on rv (none: ""), as this process's newest copy of it
// (Newest): this writer's patches and the lifecycle conditions' status
// patches (nodecond) read on from it, with no 409 for the cache's lag.
func (w *Nodes) Remember(node, rv string, out *corev1.Node) {
	_, _ = observe.TrimCached(out) // kept beside the cache, so trimmed as the cache is
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.written == nil {
		w.written, w.older = map[string]*corev1.Node{}, map[string]map[string]bool{}
	}
	if w.older[node] == nil {
		w.older[node] = map[string]bool{}
	}
	if prev := w.written[node]; prev != nil {
		w.older[node][prev.ResourceVersion] = true
	}
	if rv != "" {
		w.older[node][rv] = true
	}
	w.written[node] = out
}

// Record writes a node's step record: ann turns prev, the record the step
// was decided from (as rollout uid's worker reads it, ForRollout), into the
// next one. The patch is conditional on the resourceVersion of a copy that
// still holds prev, read as Cordon reads (Newest: no request): any other
// write to the node in between (the kubelet's) costs a 409 and a retry from
// the newer copy, and a copy whose record is no longer prev (a leader that
// took over wrote it) fails with nodestep.ErrRecordMoved, for the worker to
// decide again. So a write of a deposed leader that was already on its way
// when its process stopped cannot land over its successor's record.
func (w *Nodes) Record(ctx context.Context, uid types.UID, node string, prev nodestep.Record, ann map[string]*string) (nodestep.Record, error) {
	attempt, conflicted := 0, ""
	var out nodestep.Record
	err := onConflict(ctx, func() error {
		attempt++
		n, err := w.read(ctx, node, attempt, false, conflicted)
		if err != nil {
			return err
		}
		conflicted = n.ResourceVersion
		if live := nodestep.ParseRecord(n.Annotations).ForRollout(uid); !live.Same(prev) {
			return fmt.Errorf("node %s: %w (it holds step %q of %q written %s, the step was decided from %q written %s)", node, nodestep.ErrRecordMoved,
				live.Step, live.Rollout, live.StepSince.Format(time.RFC3339Nano), prev.Step, prev.StepSince.Format(time.RFC3339Nano))
		}
		out, err = w.Patch(ctx, node, n.ResourceVersion, ann, nil)
		return err
	})
	return out, err
}

// Cordon cordons the node and records whether it was already
// unschedulable (once, before anything else: nodestep.Record.Cordoned), in one
// patch conditional on the resourceVersion it read. with are more
// annotations for the same patch (the step's record). It returns the record
// as the API then holds it.
func (w *Nodes) Cordon(ctx context.Context, rollout, node string, rec nodestep.Record, with map[string]*string) (nodestep.Record, error) {
	attempt, conflicted := 0, ""
	out := rec
	err := onConflict(ctx, func() error {
		attempt++
		n, err := w.read(ctx, node, attempt, false, conflicted)
		if err != nil {
			return err
		}
		conflicted = n.ResourceVersion
		live := nodestep.ParseRecord(n.Annotations)
		next, set := live.Cordoned(rollout, n.Spec.Unschedulable)
		ann := next.Patch(live)
		for k, v := range with {
			ann[k] = v
		}
		if !set {
			if len(ann) == 0 {
				out = live
				return nil
			}
			out, err = w.Patch(ctx, node, n.ResourceVersion, ann, nil)
			return err
		}
		out, err = w.Patch(ctx, node, n.ResourceVersion, ann, nodestep.Ptr(true))
		return err
	})
	return out, err
}

// Newest is the node as this process knows it best, without a request:
// the cache once it holds this process's last patch (a version holding the
// same step record, not one known to be older: then it is at least as new
// as every write of ours, and it may hold others' later writes, such as the
// unschedulable taint), else what that last patch returned, else the cache
// (nil when neither has it). A cached version this process knows to be
// older is never taken for a later one, even when a patch left the step
// record as it was (a cordon resumed with nothing else to write).
func (w *Nodes) Newest(node string) *corev1.Node {
	c, err := w.Cache.Get(node)
	w.mu.Lock()
	defer w.mu.Unlock()
	mine := w.written[node]
	switch {
	case err == nil && mine != nil && !w.older[node][c.ResourceVersion] && c.Annotations[model.AnnotationStepSince] == mine.Annotations[model.AnnotationStepSince]:
		if c.ResourceVersion == mine.ResourceVersion {
			delete(w.older, node) // the cache never goes back past what it shows
		}
		return c
	case mine != nil:
		return mine
	case err == nil:
		return c
	}
	return nil
}

// read reads a node for a conditional write. On the first attempt:
// Newest, unless ownWrites (only a copy holding this process's own
// writes will do) and the only copy is the cache. After a conflict on
// resourceVersion conflicted: the first copy Newest gives at another
// version (the cache catching up with the write that conflicted), waited for
// up to conflictCatchUp; after that, or after a second conflict, the API.
// The write that follows is conditional on its resourceVersion, so a stale
// copy costs a 409 and a retry, never a lost update.
func (w *Nodes) read(ctx context.Context, node string, attempt int, ownWrites bool, conflicted string) (*corev1.Node, error) {
	w.mu.Lock()
	_, wrote := w.written[node]
	w.mu.Unlock()
	usable := wrote || !ownWrites
	switch {
	case attempt == 1 && usable:
		if n := w.Newest(node); n != nil {
			return n, nil
		}
	case attempt == 2 && usable && conflicted != "":
		until := w.Now().Add(conflictCatchUp)
		for w.Now().Before(until) {
			ch := w.Changes.Wait()
			if n := w.Newest(node); n != nil && n.ResourceVersion != conflicted {
				return n, nil
			}
			if err := observe.WaitChange(ctx, ch, until, w.Now); err != nil {
				return nil, err
			}
		}
	}
	n, err := w.Kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading node %s: %w", node, err)
	}
	return n, nil
}

// conflictCatchUp bounds read's wait for the cache to show the write a
// conditional node patch conflicted with (the watch is usually well within
// it) before it reads the node from the API.
const conflictCatchUp = 2 * time.Second

// Uncordon hands the node back (nodestep.Record.Uncordoned): schedulable again
// only if nodewise cordoned it; a node that was already cordoned stays
// cordoned. It never decides from a copy that could hide nodewise's own
// cordon: only from one holding this process's last step record
// (read), or the API. with are more annotations for the same patch.
func (w *Nodes) Uncordon(ctx context.Context, node string, rec nodestep.Record, with map[string]*string) (nodestep.Record, error) {
	attempt, conflicted := 0, ""
	out := rec
	err := onConflict(ctx, func() error {
		attempt++
		n, err := w.read(ctx, node, attempt, true, conflicted)
		if err != nil {
			return err
		}
		conflicted = n.ResourceVersion
		live := nodestep.ParseRecord(n.Annotations)
		next, clear := live.Uncordoned()
		ann := next.Patch(live)
		for k, v := range with {
			ann[k] = v
		}
		if len(ann) == 0 {
			out = live
			return nil
		}
		var unschedulable *bool
		if clear {
			unschedulable = nodestep.Ptr(false)
		}
		if out, err = w.Patch(ctx, node, n.ResourceVersion, ann, unschedulable); err != nil {
			return err
		}
		if live.KeepCordoned != nil && live.CordonedBy != "" && live.PriorUnschedulable != "true" {
			w.Log.Info("left cordoned", zap.String("node", node), zap.String(model.AnnotationKeepCordoned, *live.KeepCordoned))
			w.Recorder.Eventf(&corev1.ObjectReference{Kind: "Node", Name: node, UID: n.UID, APIVersion: "v1"}, corev1.EventTypeNormal, "NodewiseLeftCordoned",
				"nodewise's uncordon left the node cordoned: %s=%q", model.AnnotationKeepCordoned, *live.KeepCordoned)
		}
		return nil
	})
	return out, err
}
