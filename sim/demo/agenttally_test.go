package demo

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/sim/dataplane"
)

// agentTally follows, for each pod over a run, what its node agent counts
// (the app side's resets received: the agent's view of the RSTs the pod's
// application got) and what the application itself saw (Truth.RSTs), read
// together. Each pod is compared over its own window, from the first reading
// that saw it to the last: a pod created during the run starts at its first
// reading (its namespace's counters may carry a gone pod's, since namespace
// inode numbers are reused), and an evicted pod ends at its last one.
type agentTally struct {
	agents *dataplane.Agents
	truth  func() (map[string]dataplane.Truth, dataplane.Truth)
	cancel context.CancelFunc
	done   chan struct{}

	mu          sync.Mutex
	first, last map[string][2]int64 // namespace/name → {agent, app}
}

// startTally takes a first reading now (the start of the window), then one
// every period until finish.
func startTally(a *dataplane.Agents, dp *dataplane.DataPlane, every time.Duration) *agentTally {
	ctx, cancel := context.WithCancel(context.Background())
	t := &agentTally{agents: a, truth: dp.Truth, cancel: cancel, done: make(chan struct{}), first: map[string][2]int64{}, last: map[string][2]int64{}}
	t.sample()
	go func() {
		defer close(t.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				t.sample()
			}
		}
	}()
	return t
}

func (t *agentTally) sample() {
	for _, node := range t.agents.Nodes() {
		s, err := t.agents.Snapshot(node)
		if err != nil {
			continue // the next period reads it again
		}
		apps, _ := t.truth()
		t.mu.Lock()
		for _, p := range s.Pods {
			if p.Side != wire.SideApp {
				continue
			}
			k := p.Namespace + "/" + p.Name
			v := [2]int64{int64(p.ResetsReceived), apps[k].RSTs}
			if _, ok := t.first[k]; !ok {
				t.first[k] = v
			}
			t.last[k] = v
		}
		t.mu.Unlock()
	}
}

// finish takes a last reading and returns each pod's counts over its window.
func (t *agentTally) finish() map[string][2]int64 {
	t.cancel()
	<-t.done
	t.sample()
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string][2]int64{}
	for k, v := range t.last {
		f := t.first[k]
		out[k] = [2]int64{v[0] - f[0], v[1] - f[1]}
	}
	return out
}

// agreement compares the agents' per-pod counts with the pods' own ground
// truth (RSTs their apps received), each pod over its window.
type agreement struct {
	agent, truth  int64 // summed over pods
	pods, agreed  int   // pods with a reset on either side; of those, with equal counts
	maxDiff       int64
	worstPod      string
	worstA, worst int64
}

func compareAgents(perPod map[string][2]int64) agreement {
	var g agreement
	for k, v := range perPod {
		a, truth := v[0], v[1]
		if a == 0 && truth == 0 {
			continue
		}
		g.pods++
		g.agent += a
		g.truth += truth
		d := a - truth
		if d < 0 {
			d = -d
		}
		if d == 0 {
			g.agreed++
		}
		if d > g.maxDiff {
			g.maxDiff, g.worstPod, g.worstA, g.worst = d, k, a, truth
		}
	}
	return g
}

func (g agreement) String() string {
	s := fmt.Sprintf("%d/%d pods equal", g.agreed, g.pods)
	if g.maxDiff > 0 {
		s += fmt.Sprintf(", largest gap %s: agent %d, app %d", g.worstPod, g.worstA, g.worst)
	}
	return s
}

// verdicts summarises the judge's verdict on every node of a rollout: drain
// policy auto's decision when it made one, the outcome, "(no traffic)" where
// the node had none left to judge in its soak (drained) and the rollout lets
// that pass, and the planned resets counted.
func verdicts(nr *v1alpha1.NodeRollout, decisions map[string]string) string {
	if nr == nil {
		return "- (no rollout: the DaemonSet controller swapped the nodes)"
	}
	nodes := append([]v1alpha1.NodeStatus(nil), nr.Status.Nodes...)
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	var parts []string
	for _, n := range nodes {
		outcome, _, _ := strings.Cut(n.Verdict, ":")
		if outcome == "" {
			outcome = "none"
		}
		if strings.Contains(n.Verdict, "passed by gates.inconclusive: Pass") {
			outcome += " (no traffic)"
		}
		if j := n.Judgement; j != nil && j.PlannedResets > 0 {
			outcome += fmt.Sprintf(" (%d planned resets)", j.PlannedResets)
		}
		if d := decisions[n.Name]; d != "" {
			outcome = d + ", " + outcome
		}
		parts = append(parts, n.Name+" "+outcome)
	}
	return strings.Join(parts, ", ")
}

// drainDecisions reads drain policy auto's decision on each node (the node
// annotation the orchestrator writes before acting on it).
func drainDecisions(ctx context.Context, c *cluster.Cluster) map[string]string {
	out := map[string]string{}
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return out
	}
	for _, n := range nodes.Items {
		if d := n.Annotations[model.AnnotationDrainDecision]; d != "" {
			out[n.Name] = d
		}
	}
	return out
}
