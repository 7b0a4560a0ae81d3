package orchestrator

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"

	"go.uber.org/zap"
	"k8s.io/kubectl/pkg/drain"

	"github.com/nodewise/nodewise/orchestrator/apis/v1alpha1"
)

// drain evicts the node's pods when the policy says so. DaemonSet pods are
// ignored, mirror pods skipped (the library's default filter), evictions go
// through the Eviction API with a finite timeout and a retry delay of at
// least 5 s. A PodDisruptionBudget that keeps refusing follows pdbBlocked.
func (e *executor) drain(ctx context.Context, nr *v1alpha1.NodeRollout, p Policy, node string) error {
	switch p.Drain {
	case v1alpha1.DrainNever:
		return nil
	case v1alpha1.DrainAuto:
		// The node agent's connection ages decide this once it exists; until
		// then auto drains (the safe choice).
	}
	for attempt := 1; ; attempt++ {
		errOut := &lineRecorder{}
		h := &drain.Helper{
			Ctx:                  ctx,
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
		if ctx.Err() != nil {
			return ctx.Err()
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
		if err := e.mutateStatus(ctx, nr.Name, func(s *v1alpha1.NodeRolloutStatus) {
			nodeEntry(s, node).Reason = fmt.Sprintf("waiting (attempt %d): %s", attempt, reason)
		}); err != nil {
			return err
		}
	}
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
