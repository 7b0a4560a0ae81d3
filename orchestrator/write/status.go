package write

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/leader"
	"github.com/nodewise/nodewise/orchestrator/observe"
)

// Status group-commits NodeRollout status writes: mutations queue up,
// and one writer at a time applies every queued mutation to the last status
// the API returned and writes it with its resourceVersion. On a 409 it
// re-reads and re-applies, but only once Fence says this replica still
// leads: a conflict is how a deposed leader meets its successor's status,
// which it must not overwrite. A caller either waits for the write that
// carries its mutation (Mutate) or does not (MutateLater). Build it with
// NewStatus.
type Status struct {
	rollouts v1alpha1.NodeRolloutInterface
	log      *zap.Logger
	wg       sync.WaitGroup // the writer goroutines (Wait)
	// Fence, when set, is nil while this replica holds the leader Lease
	// (leader.Guard.Check). Every write is fenced in the client too; the
	// writer asks before it re-reads after a conflict and before a retry,
	// and a refused batch is kept queued, quietly, until the leader's
	// context ends (or the fence opens again: a renew that came late).
	Fence func() error

	// mu guards everything below; it is never held across a request.
	mu      sync.Mutex
	pending []statusReq // queued, not yet taken by the writer
	writing []statusReq // taken by the writer, request in flight
	active  bool        // a writer goroutine is running
	last    time.Time   // when the last write was sent
	// urgent wakes a writer pacing a write behind when a caller waits.
	urgent chan struct{}
	// current is the last NodeRollout the API returned to this process, by
	// name; never changed (a write changes a copy).
	current map[string]*v1alpha1.NodeRollout
	// shown is, by name, what Current returns, made when first asked and
	// dropped once a mutation is queued or an answer remembered: every
	// pass and worker asking in between shares it, uncopied.
	shown map[string]v1alpha1.NodeRolloutStatus
	// life is the leader's context: the writer goroutine runs on it, not on
	// the context of whoever queued first (a node worker's, a drain's),
	// which may end while writes behind are still queued.
	life context.Context
}

// statusReq is one queued status mutation; done (nil for a write behind)
// receives the result of the write that carried it.
type statusReq struct {
	name string
	f    func(*v1alpha1.NodeRolloutStatus)
	done chan error
}

// NewStatus is a status writer whose writes run on life (the leader's
// context), not on the context of whoever queued first (a node worker's, a
// drain's), which may end while writes behind are still queued.
func NewStatus(life context.Context, rollouts v1alpha1.NodeRolloutInterface, log *zap.Logger) *Status {
	return &Status{rollouts: rollouts, log: log, life: life, current: map[string]*v1alpha1.NodeRollout{}, shown: map[string]v1alpha1.NodeRolloutStatus{}, urgent: make(chan struct{}, 1)}
}

// Wait waits for the writer goroutines to end (after life ends).
func (w *Status) Wait() { w.wg.Wait() }

// Mutate applies f to the NodeRollout's status and returns once a
// write containing f succeeded.
func (w *Status) Mutate(ctx context.Context, name string, f func(*v1alpha1.NodeRolloutStatus)) error {
	r := statusReq{name: name, f: f, done: make(chan error, 1)}
	w.enqueue(r)
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// MutateLater queues f without waiting for its write: for the status
// mirror of a node step whose record of truth (the node annotation) is
// already persisted. A failed write is retried with the next batch.
func (w *Status) MutateLater(name string, f func(*v1alpha1.NodeRolloutStatus)) {
	w.enqueue(statusReq{name: name, f: f})
}

// statusEvery paces writes behind: a batch nobody waits for is sent at most
// this often, so it carries more nodes' steps, and the 200-entry object is
// decoded, validated, stored and sent to every watcher fewer times. A write
// somebody waits for goes out as soon as the one in flight returns.
const statusEvery = 500 * time.Millisecond

func (w *Status) enqueue(r statusReq) {
	w.mu.Lock()
	w.pending = append(w.pending, r)
	delete(w.shown, r.name)
	start := !w.active
	w.active = true
	urgent := w.urgent
	w.mu.Unlock()
	if r.done != nil {
		select {
		case urgent <- struct{}{}:
		default:
		}
	}
	if start {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.writeQueued(w.life)
		}()
	}
}

// writeQueued writes queued mutations until the queue is empty.
func (w *Status) writeQueued(ctx context.Context) {
	for {
		w.mu.Lock()
		wait := statusEvery - time.Since(w.last)
		for _, q := range w.pending {
			if q.done != nil {
				wait = 0
			}
		}
		urgent := w.urgent
		w.mu.Unlock()
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-urgent:
			case <-ctx.Done():
			}
			t.Stop()
		}
		w.mu.Lock()
		w.last = time.Now()
		batch := w.pending
		w.pending, w.writing = nil, batch
		if len(batch) == 0 {
			w.active = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		var names []string
		byName := map[string][]statusReq{}
		for _, q := range batch {
			if _, ok := byName[q.name]; !ok {
				names = append(names, q.name)
			}
			byName[q.name] = append(byName[q.name], q)
		}
		var retry []statusReq
		for _, n := range names {
			err := w.write(ctx, n, byName[n])
			for _, q := range byName[n] {
				switch {
				case q.done != nil:
					q.done <- err
				case err != nil && ctx.Err() == nil && !apierrors.IsNotFound(err):
					retry = append(retry, q) // a deleted rollout's writes are dropped
				}
			}
			switch {
			case apierrors.IsNotFound(err):
				w.remember(n, nil)
			case errors.Is(err, leader.ErrNotLeading):
				w.log.Debug("not writing NodeRollout status: not leading", zap.String("rollout", n), zap.Error(err))
			case err != nil && ctx.Err() == nil:
				w.log.Warn("writing NodeRollout status; retrying", zap.String("rollout", n), zap.Error(err))
			}
		}
		w.mu.Lock()
		w.writing = nil
		w.pending = append(retry, w.pending...)
		w.mu.Unlock()
		if len(retry) > 0 {
			if err := observe.SleepUntil(ctx, time.Now().Add(200*time.Millisecond), time.Now); err != nil {
				w.mu.Lock()
				w.active = false
				w.mu.Unlock()
				return
			}
		}
	}
}

func (w *Status) write(ctx context.Context, name string, qs []statusReq) error {
	return onConflict(ctx, func() error {
		if w.Fence != nil {
			if err := w.Fence(); err != nil {
				return fmt.Errorf("writing NodeRollout %s status: %w", name, err)
			}
		}
		w.mu.Lock()
		cur := w.current[name]
		w.mu.Unlock()
		if cur == nil {
			fresh, err := w.rollouts.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("reading NodeRollout %s: %w", name, err)
			}
			cur = fresh
		}
		next := cur.DeepCopy()
		for _, q := range qs {
			q.f(&next.Status)
		}
		next.Status.Counts = counted(&next.Status)
		next.Status.FollowPhase(metav1.Now()) // GitOps tools read a halt from the same write
		// Trimmed here, and over the budget degraded in what is written
		// only: this process keeps every entry, so its counts and the
		// passes it plans stay whole (see budget.go and omit.go).
		sent := *next
		var apart bool
		sent.Status, _, _, apart = fit(&next.Status)
		if equalStatus(cur.Status, next.Status) {
			w.remember(name, cur)
			return nil
		}
		out, err := w.rollouts.UpdateStatus(ctx, &sent, metav1.UpdateOptions{})
		switch {
		case apierrors.IsConflict(err):
			w.remember(name, nil) // re-read on the retry
			return err
		case err != nil:
			return fmt.Errorf("writing NodeRollout %s status: %w", name, err)
		}
		if apart {
			out.Status = next.Status // what was written, with every entry
		}
		w.remember(name, out)
		return nil
	})
}

// remember records the NodeRollout the API returned (nil forgets it), its
// counts counted here, once, rather than by each pass that reads it.
func (w *Status) remember(name string, nr *v1alpha1.NodeRollout) {
	if nr != nil {
		if c := counted(&nr.Status); c != nr.Status.Counts {
			counts := *nr // the answer itself is never changed: a copy, its entries shared
			counts.Status.Counts = c
			nr = &counts
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.shown, name)
	if nr == nil {
		delete(w.current, name)
		return
	}
	w.current[name] = nr
}

// Current is the NodeRollout's status as this process last wrote it
// (the API's answer, with every entry a status over its budget left out of
// what was written) with every mutation still queued or in flight applied:
// what the status will be once the queue is written. ok is false when this
// process has not written the rollout (uid: of the same object) yet. The
// status is shared with every caller until the next mutation or answer:
// read it, never change it (DeepCopy first).
func (w *Status) Current(name string, uid types.UID) (v1alpha1.NodeRolloutStatus, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	cur := w.current[name]
	if cur == nil || (uid != "" && cur.UID != uid) {
		return v1alpha1.NodeRolloutStatus{}, false
	}
	if s, ok := w.shown[name]; ok {
		return s, true
	}
	var queued []statusReq
	for _, q := range append(w.writing[:len(w.writing):len(w.writing)], w.pending...) {
		if q.name == name {
			queued = append(queued, q)
		}
	}
	s := cur.Status // the answer itself, when nothing changes it (counted: remember)
	if len(queued) > 0 {
		s = *cur.Status.DeepCopy()
		for _, q := range queued {
			q.f(&s) // mutations are idempotent: applying one the API already holds changes nothing
		}
		s.Counts = counted(&s)
	}
	w.shown[name] = s
	return s, true
}

// Forget drops a rollout's remembered status (it was recreated).
func (w *Status) Forget(name string) { w.remember(name, nil) }

func equalStatus(a, b v1alpha1.NodeRolloutStatus) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}
