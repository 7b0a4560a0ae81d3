package drain

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/record"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"
	kdrain "k8s.io/kubectl/pkg/drain"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/observe"
)

// Drainer drains a node for its Drain step: evictions through the Eviction
// API (kubectl's drain library) under the policy's PDB handling, or, under
// policy auto, first the choice between a drain and a swap in place.
type Drainer struct {
	Kube kubernetes.Interface
	Log  *zap.Logger
	Now  func() time.Time
	// EvictRetryDelay is the wait after a refused eviction.
	EvictRetryDelay time.Duration
	// Namespace is nodewise's own, whose pods a drain leaves alone.
	Namespace string
	// Agents answers drain policy auto's question (nil: no agent configured).
	Agents   health.SnapshotSource
	Targets  observe.Targets
	Nodes    corelisters.NodeLister
	Recorder record.EventRecorder
	Status   StatusWriter
	Records  NodePatcher
	// Leaving says why the node's steps must stop ("" while they go on).
	Leaving func(nr *v1alpha1.NodeRollout, node string) nodestep.Leave
	// Conditions sets DrainInProgress on the node while its pods are
	// evicted (nodecond.Writer); nil: not written.
	Conditions Draining
}

// Draining sets (on) or clears the node's DrainInProgress condition for rollout.
type Draining interface {
	Draining(ctx context.Context, rollout, node string, on bool) error
}

// StatusWriter writes a mutation of a NodeRollout's status (write.Status).
type StatusWriter interface {
	Mutate(ctx context.Context, name string, f func(*v1alpha1.NodeRolloutStatus)) error
}

// NodePatcher writes a node's record, conditional on it (write.Nodes.Record).
type NodePatcher interface {
	Record(ctx context.Context, uid types.UID, node string, prev nodestep.Record, ann map[string]*string) (nodestep.Record, error)
}

// Drain evicts the node's pods when the policy says so. DaemonSet pods are
// ignored, mirror pods skipped (the library's default filter), evictions go
// through the Eviction API with a finite timeout and a retry delay of at
// least 5 s. A PodDisruptionBudget that keeps refusing follows pdbBlocked.
// Under policy auto the node agent's connection ages decide first (autoDrain).
//
// The timeout ends at deadline, counted from the Drain step's persisted
// start, so a successor after a restart gets only what is left of it: past
// it, a dry-run eviction tells a PDB refusal from a drain still under way.
// It returns the record as it then stands and whether a drain finished.
func (d *Drainer) Drain(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, node string, rec nodestep.Record, deadline time.Time) (nodestep.Record, bool, error) {
	switch p.Drain {
	case v1alpha1.DrainNever:
		return rec, false, nil
	case v1alpha1.DrainAuto:
		var drain bool
		var err error
		if rec, drain, err = d.autoDrain(ctx, nr, p, node, rec); err != nil || !drain {
			return rec, false, err
		}
	}
	// An abort reaches a drain in progress (a PDB may hold it for the whole
	// timeout, or forever under wait): the drain stops, and the worker's next
	// pass makes the node safe (abort cleanup uncordons it).
	dctx, stop := d.untilLeaving(ctx, nr, node)
	defer stop()
	d.draining(ctx, nr.Name, node, true)
	defer d.draining(ctx, nr.Name, node, false)
	for attempt := 1; ; attempt++ {
		timeout := p.DrainTimeout // under pdbBlocked wait, every later attempt is finite too
		if attempt == 1 {
			timeout = deadline.Sub(d.Now())
		}
		errOut := &lineRecorder{}
		h := &kdrain.Helper{
			Ctx:                  dctx,
			Client:               d.Kube,
			GracePeriodSeconds:   -1,
			IgnoreAllDaemonSets:  true,
			DeleteEmptyDirData:   true,
			Timeout:              timeout,
			EvictErrorRetryDelay: d.EvictRetryDelay,
			AdditionalFilters:    []kdrain.PodFilter{nodestep.SkipOwnPods(d.Namespace)},
			Out:                  &lineRecorder{},
			ErrOut:               errOut,
		}
		var pdb string
		var err error
		if timeout < time.Second {
			// The bound passed (or all but) before this attempt: a
			// successor resumed the drain late. No waiting: only what
			// blocks the drain now.
			if pdb, err = pdbRefusal(h, node); err == nil && pdb == "" {
				h.Timeout = time.Nanosecond // done if nothing is left to evict
				if err = kdrain.RunNodeDrain(h, node); err != nil {
					err = fmt.Errorf("the drain timeout %s (counted from the Drain step's start) passed: %w", p.DrainTimeout, err)
				}
			}
		} else if err = kdrain.RunNodeDrain(h, node); err != nil && onlyTimedOut(err) {
			// A refusal the library retried through to success is no
			// block, nor one followed by another failure (that failure
			// halts the rollout with its own reason).
			pdb = errOut.find("disruption budget")
		}
		if err == nil && pdb == "" {
			return rec, true, nil
		}
		if dctx.Err() != nil {
			return rec, false, context.Cause(dctx)
		}
		if pdb == "" {
			return rec, false, nodestep.Halt(nodestep.HaltDrainFailed, "drain: %v", err)
		}
		reason := "drain blocked by a PodDisruptionBudget: " + strings.TrimSpace(pdb)
		switch p.PDBBlocked {
		case v1alpha1.PDBSkipNode:
			return rec, false, &nodestep.StepError{Halt: nodestep.HaltPDBBlocked, Reason: reason, Skip: true}
		case v1alpha1.PDBHalt:
			return rec, false, nodestep.Halt(nodestep.HaltPDBBlocked, "%s", reason)
		}
		// wait: record why, then try again (each attempt is still finite).
		d.Log.Info("drain waiting on a PodDisruptionBudget", zap.String("node", node), zap.Int("attempt", attempt))
		if err := d.Status.Mutate(dctx, nr.Name, func(s *v1alpha1.NodeRolloutStatus) {
			model.NodeEntry(s, node).Reason = fmt.Sprintf("waiting (attempt %d): %s", attempt, reason)
		}); err != nil {
			if dctx.Err() != nil {
				return rec, false, context.Cause(dctx)
			}
			return rec, false, err
		}
	}
}

// draining writes the node's DrainInProgress (on or off). A write that
// fails is logged: the condition tells other tools, it gates nothing here
// (the next full pass clears one left behind).
func (d *Drainer) draining(ctx context.Context, rollout, node string, on bool) {
	if d.Conditions == nil {
		return
	}
	if err := d.Conditions.Draining(ctx, rollout, node, on); err != nil && ctx.Err() == nil {
		d.Log.Warn("writing the node's DrainInProgress condition", zap.String("rollout", rollout), zap.String("node", node), zap.Bool("draining", on), zap.Error(err))
	}
}

// errLeftDuringDrain stops a drain when its node must be made safe (the
// rollout aborted or deleted, the node out of its selector). It is not a
// step error: the worker ends, and its next pass, seeing why, makes the node
// safe from the persisted Drain step (nothing was swapped).
var errLeftDuringDrain = errors.New("drain stopped: the node leaves the rollout")

// abortPoll is how often a drain in progress looks for a reason to stop (in the cache).
const abortPoll = 250 * time.Millisecond

// untilLeaving is ctx, also cancelled (with errLeftDuringDrain) once the
// caches say the node leaves the rollout (Leaving).
func (d *Drainer) untilLeaving(ctx context.Context, nr *v1alpha1.NodeRollout, node string) (context.Context, func()) {
	return observe.CancelWhen(ctx, abortPoll, func() error {
		if why := d.Leaving(nr, node); why != "" {
			return fmt.Errorf("%w (%s)", errLeftDuringDrain, why)
		}
		return nil
	})
}

// pdbRefusal asks the Eviction API, in a dry run, whether a PodDisruptionBudget
// refuses the eviction of one of the pods a drain of the node would evict,
// and returns the first refusal ("" if none).
func pdbRefusal(h *kdrain.Helper, node string) (string, error) {
	list, errs := h.GetPodsForDeletion(node)
	if len(errs) > 0 {
		return "", fmt.Errorf("listing the pods to evict from node %s: %w", node, errors.Join(errs...))
	}
	dry := *h
	dry.DryRunStrategy = cmdutil.DryRunServer
	for _, pod := range list.Pods() {
		err := dry.EvictPod(pod, policyv1.SchemeGroupVersion)
		switch {
		case apierrors.IsTooManyRequests(err):
			return fmt.Sprintf("pods/%q -n %q: %v", pod.Name, pod.Namespace, err), nil
		case err != nil && !apierrors.IsNotFound(err):
			return "", fmt.Errorf("dry-run eviction of pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
	}
	return "", nil
}

// autoDrain decides drain policy auto for the node (nodestep.DecideAuto) and
// persists the choice before anything acts on it: the node's record, the
// reason in its status entry, and an Event on the NodeRollout and the Node.
// A successor after a crash reads the choice back instead of asking the
// agent again, so a half-done drain is never followed by a swap in place.
func (d *Drainer) autoDrain(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, node string, rec nodestep.Record) (nodestep.Record, bool, error) {
	if drain, ok := rec.AutoDecision(nr.UID, rec.StepSince); ok {
		return rec, drain, nil
	}
	in, err := d.observeAuto(ctx, p, node)
	if err != nil {
		return rec, false, err
	}
	c := nodestep.DecideAuto(in)
	next := rec.Clone()
	next.DrainDecision, next.DrainDecidedAt = nodestep.DrainDecisionInPlace, d.Now()
	if c.Drain {
		next.DrainDecision = nodestep.DrainDecisionDrain
	}
	type written struct {
		rec nodestep.Record
		err error
	}
	nodeErr := make(chan written, 1)
	go func() {
		w, err := d.Records.Record(ctx, nr.UID, node, rec, next.Patch(rec))
		nodeErr <- written{w, err}
	}()
	statusErr := d.Status.Mutate(ctx, nr.Name, func(s *v1alpha1.NodeRolloutStatus) {
		model.NodeEntry(s, node).Reason = "drain auto: " + c.Reason
	})
	w := <-nodeErr
	if err := errors.Join(w.err, statusErr); err != nil {
		return rec, false, fmt.Errorf("persisting the drain decision for node %s: %w", node, err)
	}
	d.Recorder.Eventf(nr, corev1.EventTypeNormal, "DrainDecision", "node %s: %s", node, c.Reason)
	d.Recorder.Eventf(&corev1.ObjectReference{Kind: "Node", Name: node, UID: d.nodeUID(node), APIVersion: "v1"}, corev1.EventTypeNormal, "NodewiseDrainDecision", "NodeRollout %s: %s", nr.Name, c.Reason)
	d.Log.Info("drain decision", zap.String("rollout", nr.Name), zap.String("node", node), zap.Bool("drain", c.Drain), zap.String("reason", c.Reason))
	return w.rec.ForRollout(nr.UID), c.Drain, nil
}

// observeAuto gathers nodestep.DecideAuto's input: the node's pods from the cache,
// ztunnel's drain deadline from the ztunnel pod running on the node (the old
// one: nothing is swapped before Drain, and its grace period is the one
// SIGTERM will honour), and the agent's snapshot.
func (d *Drainer) observeAuto(ctx context.Context, p model.Policy, node string) (nodestep.AutoInput, error) {
	var in nodestep.AutoInput
	grace := time.Duration(-1)
	for _, ref := range p.Targets {
		if nodestep.SwapState(ref) != v1alpha1.NodeSwapZtunnel {
			continue
		}
		in.SwapsZtunnel, in.Swap = true, model.SwapKind(nodestep.SwapKindOf(p, ref))
		tv, err := d.Targets.Target(ref)
		if err != nil {
			return in, err
		}
		live, _, err := d.Targets.OnNode(tv, node)
		if err != nil {
			return in, err
		}
		// Not filtered by revision: right after a template change the
		// ControllerRevision cache can lag, and the pod's own grace is what
		// counts. With more than one, the shortest deadline is the cautious one.
		for _, pod := range live {
			g := nodestep.DefaultZtunnelGrace
			if pod.Spec.TerminationGracePeriodSeconds != nil {
				g = time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
			}
			if grace < 0 || g < grace {
				grace = g
			}
		}
		if grace < 0 {
			ds, _ := d.Targets.DaemonSets.DaemonSets(ref.Namespace).Get(ref.Name)
			grace = nodestep.ZtunnelGrace(ds)
		}
	}
	in.Deadline = health.DrainDeadline(grace)
	in.LongLived = p.LongLivedAfter
	pods, err := d.Targets.Pods.OnNode(node)
	if err != nil {
		return in, fmt.Errorf("listing pods on node %s: %w", node, err)
	}
	in.Pods = pods
	if !in.SwapsZtunnel || len(nodestep.MovablePods(in.Pods)) == 0 {
		return in, nil // nothing to ask the agent
	}
	if d.Agents == nil {
		in.AgentErr = errors.New("no node agent configured (orchestrator --agent-ca and --agent-token-file)")
		return in, nil
	}
	in.Snapshot, in.AgentErr = d.Agents.Snapshot(ctx, node)
	if ctx.Err() != nil {
		return in, ctx.Err()
	}
	return in, nil
}

// lineRecorder keeps what the drain library prints, to tell a PDB refusal
// (HTTP 429 on eviction) from other failures.
type lineRecorder struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lineRecorder) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buf.Len() > 64<<10 {
		l.buf.Reset()
	}
	return l.buf.Write(b)
}

func (l *lineRecorder) find(substr string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := strings.Split(l.buf.String(), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], substr) {
			return lines[i]
		}
	}
	return ""
}

// onlyTimedOut tells whether every pod the drain library could not evict
// ran out of time, and none failed otherwise: an eviction a
// PodDisruptionBudget refused to the end ("global timeout reached"), or an
// evicted pod still terminating when the time ran out (its wait's context
// deadline). The library wraps both with %v, so its words are what is left.
func onlyTimedOut(err error) bool {
	errs := []error{err}
	var agg utilerrors.Aggregate
	if errors.As(err, &agg) {
		errs = agg.Errors()
	}
	for _, e := range errs {
		if msg := e.Error(); !strings.Contains(msg, "global timeout reached") && !strings.Contains(msg, context.DeadlineExceeded.Error()) {
			return false
		}
	}
	return len(errs) > 0
}

func (d *Drainer) nodeUID(node string) types.UID {
	if n, err := d.Nodes.Get(node); err == nil {
		return n.UID
	}
	return ""
}
