package nodestep

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// Values of AnnotationDrainDecision.
const (
	DrainDecisionDrain   = "drain"
	DrainDecisionInPlace = "in-place"
)

// AutoInput is what drain policy auto decides from, observed at the node's
// Drain step.
type AutoInput struct {
	// SwapsZtunnel: ztunnel is a target. Only ztunnel's swap resets
	// connections (istio-cni carries no traffic).
	SwapsZtunnel bool
	// Swap is how ztunnel is swapped. Under SwapSurge a new ztunnel listens
	// beside the old one, so only connections still open at the old one's
	// drain deadline are hurt. Under SwapReplace the node also has no
	// listener while the old one drains, so every new connection of its pods
	// is refused then. Empty decides as SwapSurge does, except that the
	// reason names no swap.
	Swap model.SwapKind
	// Deadline is ztunnel's drain deadline on the node (health.DrainDeadline
	// of the old ztunnel pod's grace period).
	Deadline time.Duration
	// LongLived is spec.drain.longLivedAfter: a connection open longer than
	// this is taken to be one that will still be open at the deadline.
	LongLived time.Duration
	// Pods are the pods bound to the node (from the cache).
	Pods []*corev1.Pod
	// Snapshot is the node agent's snapshot, valid when AgentErr is nil.
	Snapshot wire.Snapshot
	// AgentErr is why there is no snapshot (no agent configured, or it did not answer).
	AgentErr error
}

// autoChoice is drain policy auto's decision for one node, with the reason a
// person reads in status, in the Event and in the log.
type autoChoice struct {
	Drain  bool
	Reason string
}

// maxNamed is how many pods a reason names before "and N more".
const maxNamed = 3

// DecideAuto is drain policy auto, a pure function: drain the node when a pod
// that a drain would move may hold a long-lived connection, one open longer
// than LongLived (capped by ztunnel's drain deadline); swap in place
// otherwise. A swap in place resets every connection still open at the old
// ztunnel's deadline, and what is open then is not only what is older than
// the deadline now: a stream 10 s old at the decision is cut just the same
// if it lives on. So the question is whether the pods hold connections that
// outlive short requests at all.
//
// Whenever the agent cannot vouch for a pod, the answer is drain. A needless
// drain costs a rescheduling of pods that PDBs and the Eviction API keep
// orderly; a wrong swap in place resets long-lived connections on every pod
// of the node, which is the disruption nodewise exists to prevent. So the
// node is drained when:
//   - no agent is configured or it did not answer (AgentErr);
//   - the agent has no connection ages (proc mode, or buckets of another shape);
//   - a pod started before the agent did: connections opened before the agent
//     started are not in its ages (docs/nodeagent.md), so it cannot see them;
//   - a pod old enough to hold such a connection is missing from the snapshot
//     (an unattributed network namespace). A pod younger than the threshold
//     cannot hold a connection older than it and needs no ages.
//
// Only pods a drain would evict count: DaemonSet pods (ztunnel's own among
// them) and mirror pods stay on the node either way, and finished or
// terminating pods hold no connection worth moving. Both sides (app and
// proxy) of a pod count: ztunnel's in-pod sockets carry the pod's traffic.
// A bucket straddling the threshold counts whole (health.MayBeOlderThan).
func DecideAuto(in AutoInput) autoChoice {
	if !in.SwapsZtunnel {
		return autoChoice{Reason: "in place: ztunnel is not a target, so the swap resets no connection"}
	}
	movable := MovablePods(in.Pods)
	if len(movable) == 0 {
		return autoChoice{Reason: "in place: no pod on the node that a drain would move"}
	}
	threshold := in.Deadline
	if in.LongLived > 0 && in.LongLived < threshold {
		threshold = in.LongLived
	}
	longLived := fmt.Sprintf("open longer than %s (ztunnel's drain deadline %s cuts what is still open)", threshold, in.Deadline)
	if in.AgentErr != nil {
		return autoChoice{Drain: true, Reason: fmt.Sprintf("drain (fail safe): the node agent cannot tell connection ages: %v", in.AgentErr)}
	}
	s := in.Snapshot
	if s.Mode == wire.ModeProc {
		return autoChoice{Drain: true, Reason: "drain (fail safe): the node agent runs in proc mode, which has no connection ages"}
	}
	type counters struct {
		seen, unknown bool
		old, traffic  uint64
	}
	// Matched by UID; by name only for entries without one (an agent with no
	// pod lister), so a recreated pod never inherits its predecessor's ages.
	byUID := map[types.UID]*counters{}
	byName := map[types.UID]*counters{}
	for i := range s.Pods {
		pc := &s.Pods[i]
		index, key := byUID, types.UID(pc.UID)
		if pc.UID == "" {
			index, key = byName, types.UID(pc.Namespace+"/"+pc.Name)
		}
		c := index[key]
		if c == nil {
			c = &counters{}
			index[key] = c
		}
		c.seen = true
		n, ok := health.MayBeOlderThan(pc.ConnAges, threshold)
		c.old += n
		c.unknown = c.unknown || !ok
		c.traffic += pc.Connects + pc.Accepts
		for _, a := range pc.ConnAges {
			c.traffic += a
		}
	}
	var holding, blind []string
	for _, p := range movable {
		name := p.Namespace + "/" + p.Name
		c := byUID[p.UID]
		if c == nil {
			c = byName[types.UID(name)]
		}
		started := PodStart(p)
		seen := c != nil && c.seen
		switch {
		case s.Time.Sub(started) < threshold:
			// Too young to hold a long-lived connection.
		case seen && c.old > 0:
			holding = append(holding, fmt.Sprintf("%s (%d)", name, c.old))
		case !s.StartTime.IsZero() && started.Before(s.StartTime):
			blind = append(blind, fmt.Sprintf("%s started before the agent (%s), whose ages miss older connections", name, s.StartTime.UTC().Format(time.RFC3339)))
		case !seen:
			blind = append(blind, fmt.Sprintf("%s is not in the agent's snapshot", name))
		case c.unknown:
			blind = append(blind, fmt.Sprintf("%s has no connection ages", name))
		}
	}
	switch {
	case len(holding) > 0:
		return autoChoice{Drain: true, Reason: fmt.Sprintf("drain: connections %s on %s", longLived, named(holding))}
	case len(blind) > 0:
		return autoChoice{Drain: true, Reason: "drain (fail safe): the agent cannot vouch for every pod: " + named(blind)}
	}
	if in.Swap == model.SwapReplace {
		// Short requests are hurt too: nothing listens between the old
		// ztunnel's exit and the new one's start.
		var busy []string
		for _, p := range movable {
			if c := byUID[p.UID]; c != nil && c.traffic > 0 {
				busy = append(busy, p.Namespace+"/"+p.Name)
			}
		}
		if len(busy) > 0 {
			return autoChoice{Drain: true, Reason: fmt.Sprintf("drain: ztunnel is swapped break-before-make (replace), so new connections are refused until the new one listens, and %s carry traffic", named(busy))}
		}
	}
	how := ""
	if in.Swap == model.SwapSurge {
		how = "; surge: the new ztunnel listens beside the old one, so short requests are never refused"
	}
	return autoChoice{Reason: fmt.Sprintf("in place: no connection %s among %d pods (agent snapshot at %s)%s",
		longLived, len(movable), s.Time.UTC().Format(time.RFC3339), how)}
}

// MovablePods are the pods a drain would evict, sorted by namespace/name.
func MovablePods(pods []*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if model.IsTargetPod(p) { // owned by a DaemonSet
			continue
		}
		if _, bridge := p.Labels[model.LabelSurgeBridge]; bridge { // a surge bridge is a DaemonSet pod to be
			continue
		}
		if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
			continue
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name
	})
	return out
}

// PodStart is when the pod's containers could first have opened a
// connection: its status start time, else its creation.
func PodStart(p *corev1.Pod) time.Time {
	if p.Status.StartTime != nil {
		return p.Status.StartTime.Time
	}
	return p.CreationTimestamp.Time
}

func named(items []string) string {
	if len(items) <= maxNamed {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:maxNamed], ", "), len(items)-maxNamed)
}
