// Package worker drives one node of a NodeRollout through its steps: the
// next step (nodestep, pure), its record persisted (node annotation and
// status entry), then the act (preflight, cordon, drain, swap, soak, gate)
// through the rooms it is given, and again, until the node ends. Every act
// is idempotent: after a crash a successor acts on the recorded step again.
package worker

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/gate"
	"github.com/nodewise/nodewise/orchestrator/metrics"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/observe"
	"github.com/nodewise/nodewise/orchestrator/swap"
)

// Worker starts and runs the node workers of this leader: it decides each
// node's next step and acts on it. Its fields are the rooms it acts
// through, each as narrow as the worker uses it. Two narrower views over
// them, built where they act, hold the rest of a node's life: its life
// through the gate (judgedLife) and the writes of its records
// (nodeRecords).
type Worker struct {
	Log     *zap.Logger
	Metrics *metrics.Metrics
	Now     func() time.Time
	// Sleep waits until a time on Now's clock (the soak's, its enrollment
	// watchdog's); nil: a timer. A test's fake clock moves on in it.
	Sleep func(ctx context.Context, until time.Time) error
	// HoldAfterPersist, a test hook, blocks a worker right after it
	// persisted (or began) that step.
	HoldAfterPersist v1alpha1.NodeState

	Gate       gate.Gate
	Recorder   record.EventRecorder
	Nodes      corelisters.NodeLister
	Pods       observe.PodCache
	DaemonSets appslisters.DaemonSetLister
	Targets    observe.Targets
	// Rollouts is the NodeRollout cache: the live spec (abort, selector, gates).
	Rollouts cache.Store
	Claims   *observe.Claims

	NodeWrites NodeWriter
	Status     StatusWriter
	Waits      swap.Waits
	Swaps      map[model.SwapKind]swap.Swapper
	Drainer    Drainer
	// Skew checks the node's version skew at preflight (preflight.Skew).
	Skew Skew
	// Fleet is the rollout as the planner sees it: the node's control
	// group is read from it.
	Fleet Fleet
	// Prechecks holds the skew checks made for the nodes next in line
	// (Precheck); nil: every preflight checks the skew itself.
	Prechecks *Prechecks
	// Conditions writes the node lifecycle conditions of the nodes this
	// worker has out (nodecond.Writer); nil: none are written.
	Conditions Conditions
	// Silences holds an Alertmanager silence over each node while its
	// worker has it out (silence.Silencer); nil: none.
	Silences Silences
	// CNI asks the node agents for istio-cni's own health, in rollouts
	// with an istio-cni target: before the cordon and after the swap
	// (cnicheck.go). Nil (no agents): not checked.
	CNI CNIChecker

	// Fence is nil while this replica holds the leader Lease
	// (leader.Guard.Check; a nil func: always). Every write is fenced in
	// the client; the worker asks it to tell a write refused that way (or
	// an act that failed because of one) from a failure of the step.
	Fence func() error

	// Freed is called with its node when a worker that held a slot ends
	// (not one that found its node settled: errSettled).
	Freed func(node string)
	// WG counts the running workers (the leader waits for them).
	WG *sync.WaitGroup
}

// NodeWriter writes a node's record and cordon (write.Nodes), each write
// conditional on the node's resourceVersion.
type NodeWriter interface {
	Record(ctx context.Context, uid types.UID, node string, prev nodestep.Record, ann map[string]*string) (nodestep.Record, error)
	Cordon(ctx context.Context, rollout, node string, rec nodestep.Record, with map[string]*string) (nodestep.Record, error)
	Uncordon(ctx context.Context, node string, rec nodestep.Record, with map[string]*string) (nodestep.Record, error)
	Newest(node string) *corev1.Node
}

// StatusWriter writes NodeRollout status (write.Status).
type StatusWriter interface {
	Mutate(ctx context.Context, name string, f func(*v1alpha1.NodeRolloutStatus)) error
	MutateLater(name string, f func(*v1alpha1.NodeRolloutStatus))
	Current(name string, uid types.UID) (v1alpha1.NodeRolloutStatus, bool)
}

// Conditions writes MaintenanceInProgress on a node from the moment its
// slot is taken (Out) until its final record hands it back (Settled), a
// halt that leaves it cordoned keeping it (nodecond.Writer). Both write in
// the background; Out's wait returns once its write is done.
type Conditions interface {
	Out(ctx context.Context, rollout, node string) (wait func())
	Settled(ctx context.Context, node string)
}

// Drainer runs the Drain step (drain.Drainer).
type Drainer interface {
	Drain(ctx context.Context, nr *v1alpha1.NodeRollout, p model.Policy, node string, rec nodestep.Record, deadline time.Time) (nodestep.Record, bool, error)
}

// Silences holds a silence over a node from its slot's start (before its
// cordon) until end: end(true) for a node handed back expires it now,
// end(false) leaves it to run out its short TTL (silence.Silencer). A
// failure to reach Alertmanager never holds up or fails the node.
type Silences interface {
	Hold(ctx context.Context, nr *v1alpha1.NodeRollout, node string) (end func(handedBack bool))
}

// Skew checks a node's version skew against the control plane
// (preflight.Skew): a halt when the skew is not allowed, another error when
// it cannot be checked now.
type Skew interface {
	Check(ctx context.Context, p model.Policy, node string) error
}

// Fleet reads the planner's snapshot of a rollout, with the status given
// in nr: what the node's control group is drawn from.
type Fleet interface {
	Snapshot(nr *v1alpha1.NodeRollout, p model.Policy) (model.Snapshot, error)
}
