package orchestrator

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
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/kubectl/pkg/drain"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
)

// drain evicts the node's pods when the policy says so. DaemonSet pods are
// ignored, mirror pods skipped (the library's default filter), evictions go
// through the Eviction API with a finite timeout and a retry delay of at
// least 5 s. A PodDisruptionBudget that keeps refusing follows pdbBlocked.
// Under policy auto the node agent's connection ages decide first (autoDrain).
func (e *executor) drain(ctx context.Context, nr *v1alpha1.NodeRollout, p Policy, node string, since time.Time) error {
	switch p.Drain {
	case v1alpha1.DrainNever:
		return nil
	case v1alpha1.DrainAuto:
		drain, err := e.autoDrain(ctx, nr, p, node, since)
		if err != nil || !drain {
			return err
		}
	}
	// An abort reaches a drain in progress (a PDB may hold it for the whole
	// timeout, or forever under wait): the drain stops, and the worker's next
	// pass makes the node safe (abort cleanup uncordons it).
	dctx, stop := e.untilAborted(ctx, nr.Name)
	defer stop()
	for attempt := 1; ; attempt++ {
		errOut := &lineRecorder{}
		h := &drain.Helper{
			Ctx:                  dctx,
			Client:               e.o.kube,
			GracePeriodSeconds:   -1,
			IgnoreAllDaemonSets:  true,
			DeleteEmptyDirData:   true,
			Timeout:              p.DrainTimeout,
			EvictErrorRetryDelay: e.o.cfg.EvictRetryDelay,
			Out:                  &lineRecorder{},
			ErrOut:               errOut,
		}
		err := drain.RunNodeDrain(h, node)
		if err == nil {
			// Persisted with the next step: the gate reads it back to know the
			// node was not swapped in place.
			e.carryNext(nr.Name, node, func(c *carried) { c.drained = true })
			return nil
		}
		if dctx.Err() != nil {
			return context.Cause(dctx)
		}
		pdb := errOut.find("disruption budget")
		if pdb == "" {
			return halt(HaltDrainFailed, "drain: %v", err)
		}
		reason := "drain blocked by a PodDisruptionBudget: " + strings.TrimSpace(pdb)
		switch p.PDBBlocked {
		case v1alpha1.PDBSkipNode:
			return &stepError{halt: HaltPDBBlocked, reason: reason, skip: true}
		case v1alpha1.PDBHalt:
			return halt(HaltPDBBlocked, "%s", reason)
		}
		// wait: record why, then try again (each attempt is still finite).
		e.o.log.Info("drain waiting on a PodDisruptionBudget", zap.String("node", node), zap.Int("attempt", attempt))
		if err := e.mutateStatus(dctx, nr.Name, func(s *v1alpha1.NodeRolloutStatus) {
			nodeEntry(s, node).Reason = fmt.Sprintf("waiting (attempt %d): %s", attempt, reason)
		}); err != nil {
			if dctx.Err() != nil {
				return context.Cause(dctx)
			}
			return err
		}
	}
}

// errAbortedDuringDrain stops a drain when its rollout is aborted. It is not
// a step error: the worker ends, and its next pass, seeing the abort, makes
// the node safe from the persisted Drain step (nothing was swapped).
var errAbortedDuringDrain = errors.New("drain stopped: the rollout was aborted")

// abortPoll is how often a drain in progress looks for an abort (in the cache).
const abortPoll = 250 * time.Millisecond

// untilAborted is ctx, also cancelled (with errAbortedDuringDrain) once the
// cached NodeRollout asks for abort.
func (e *executor) untilAborted(ctx context.Context, rollout string) (context.Context, func()) {
	dctx, cancel := context.WithCancelCause(ctx)
	go func() {
		t := time.NewTicker(abortPoll)
		defer t.Stop()
		for {
			if live := e.latest(rollout); live != nil && live.Spec.Abort {
				cancel(errAbortedDuringDrain)
				return
			}
			select {
			case <-dctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return dctx, func() { cancel(context.Canceled) }
}

// autoDrain decides drain policy auto for the node (decideAuto) and
// persists the choice before anything acts on it: the node's decision
// annotations, the reason in its status entry, and an Event on the
// NodeRollout and the Node. A successor after a crash reads the choice back
// instead of asking the agent again, so a half-done drain is never followed
// by a swap in place.
func (e *executor) autoDrain(ctx context.Context, nr *v1alpha1.NodeRollout, p Policy, node string, since time.Time) (bool, error) {
	if n, err := e.nodes.Get(node); err == nil {
		if drain, ok := persistedAuto(n.Annotations, nr.UID, since); ok {
			return drain, nil
		}
	}
	in, err := e.observeAuto(ctx, p, node)
	if err != nil {
		return false, err
	}
	c := decideAuto(in)
	value := DrainDecisionInPlace
	if c.Drain {
		value = DrainDecisionDrain
	}
	ts := e.o.cfg.Now().UTC().Format(time.RFC3339Nano)
	nodeErr := make(chan error, 1)
	go func() {
		nodeErr <- e.patchNode(ctx, node, "", map[string]*string{AnnotationDrainDecision: ptr(value), AnnotationDrainDecidedAt: ptr(ts)}, nil)
	}()
	statusErr := e.mutateStatus(ctx, nr.Name, func(s *v1alpha1.NodeRolloutStatus) {
		nodeEntry(s, node).Reason = "drain auto: " + c.Reason
	})
	if err := errors.Join(<-nodeErr, statusErr); err != nil {
		return false, fmt.Errorf("persisting the drain decision for node %s: %w", node, err)
	}
	e.recorder.Eventf(nr, corev1.EventTypeNormal, "DrainDecision", "node %s: %s", node, c.Reason)
	e.recorder.Eventf(&corev1.ObjectReference{Kind: "Node", Name: node, UID: e.nodeUID(node), APIVersion: "v1"}, corev1.EventTypeNormal, "NodewiseDrainDecision", "NodeRollout %s: %s", nr.Name, c.Reason)
	e.o.log.Info("drain decision", zap.String("rollout", nr.Name), zap.String("node", node), zap.Bool("drain", c.Drain), zap.String("reason", c.Reason))
	return c.Drain, nil
}

// observeAuto gathers decideAuto's input: the node's pods from the cache,
// ztunnel's drain deadline from the ztunnel pod running on the node (the old
// one: nothing is swapped before Drain, and its grace period is the one
// SIGTERM will honour), and the agent's snapshot.
func (e *executor) observeAuto(ctx context.Context, p Policy, node string) (autoInput, error) {
	var in autoInput
	grace := time.Duration(-1)
	for _, ref := range p.Targets {
		if swapState(ref) != v1alpha1.NodeSwapZtunnel {
			continue
		}
		in.SwapsZtunnel = true
		tv, err := e.target(ref)
		if err != nil {
			return in, err
		}
		live, _, err := e.targetPods(tv, node)
		if err != nil {
			return in, err
		}
		// Not filtered by revision: right after a template change the
		// ControllerRevision cache can lag, and the pod's own grace is what
		// counts. With more than one, the shortest deadline is the cautious one.
		for _, pod := range live {
			g := defaultZtunnelGrace
			if pod.Spec.TerminationGracePeriodSeconds != nil {
				g = time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
			}
			if grace < 0 || g < grace {
				grace = g
			}
		}
		if grace < 0 {
			ds, _ := e.dss.DaemonSets(ref.Namespace).Get(ref.Name)
			grace = ztunnelGrace(ds)
		}
	}
	in.Deadline = health.DrainDeadline(grace)
	in.LongLived = p.LongLivedAfter
	pods, err := e.pods.List(labels.Everything())
	if err != nil {
		return in, fmt.Errorf("listing pods: %w", err)
	}
	for _, pod := range pods {
		if pod.Spec.NodeName == node {
			in.Pods = append(in.Pods, pod)
		}
	}
	if !in.SwapsZtunnel || len(movablePods(in.Pods)) == 0 {
		return in, nil // nothing to ask the agent
	}
	if e.o.cfg.Agents == nil {
		in.AgentErr = errors.New("no node agent configured (orchestrator --agent-ca and --agent-token-file)")
		return in, nil
	}
	in.Snapshot, in.AgentErr = e.o.cfg.Agents.Snapshot(ctx, node)
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
