package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/orchestrator"
	"github.com/nodewise/nodewise/orchestrator/gate"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// request writes a node request as `nodewise retry`/`nodewise skip` do
// (their own checks are cmd/nodewise's tests; these test the orchestrator's),
// and waits until the orchestrator acknowledges it.
func (e *env) request(rollout, verb, node, reason string) {
	e.t.Helper()
	r := model.NodeRequest{Token: time.Now().UTC().Format(time.RFC3339Nano), Verb: verb, Node: node, Reason: reason, By: "e2e"}
	raw, _ := json.Marshal(r)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		nr, err := e.rollouts.Get(context.Background(), rollout, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if nr.Annotations == nil {
			nr.Annotations = map[string]string{}
		}
		nr.Annotations[model.AnnotationNodeRequest] = string(raw)
		nr.Annotations[model.AnnotationNodeRequestBy] = r.By // who asks, beside the request
		_, err = e.rollouts.Update(context.Background(), nr, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatalf("writing the %s of %s: %v", verb, node, err)
	}
	e.waitFor(func(ctx context.Context) bool {
		nr, err := e.rollouts.Get(ctx, rollout, metav1.GetOptions{})
		return err == nil && nr.Annotations[model.AnnotationAckedNodeRequest] == r.Token
	}, "the orchestrator to acknowledge the "+verb+" of "+node)
}

// rolloutEvents are the messages of the Events with reason on a NodeRollout.
func (e *env) rolloutEvents(rollout, reason string) []string {
	e.t.Helper()
	events, err := e.c.Client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.kind=NodeRollout,involvedObject.name=" + rollout})
	if err != nil {
		e.t.Fatal(err)
	}
	var msgs []string
	for _, ev := range events.Items {
		if ev.Reason == reason {
			msgs = append(msgs, ev.Message)
		}
	}
	return msgs
}

func nodeStatus(nr *v1alpha1.NodeRollout, node string) v1alpha1.NodeStatus {
	for _, ns := range nr.Status.Nodes {
		if ns.Name == node {
			return ns
		}
	}
	return v1alpha1.NodeStatus{}
}

// TestRetryAndSkipNodes: the gate fails the second node once, which halts
// the rollout. While halted, the last (pending) node is skipped: it is
// recorded Skipped with who and why and an Event, and never swapped. Then
// the failed node is retried: the halt ends, it runs again from preflight
// and passes, and the rollout completes with the skip in status.
func TestRetryAndSkipNodes(t *testing.T) {
	t.Parallel()
	const nodes = 4
	e := newEnv(t, nodes, 1)
	e.upgrade("1.28.1")
	bad, skipped := e.c.Nodes[1].Name, e.c.Nodes[3].Name
	var mu sync.Mutex
	judged := map[string]int{}
	g := gate.GateFunc(func(_ context.Context, in gate.GateInput) (health.Verdict, error) {
		mu.Lock()
		defer mu.Unlock()
		judged[in.Node]++
		if in.Node == bad && judged[in.Node] == 1 {
			return health.Verdict{Outcome: health.Fail, Reasons: []string{"test gate refuses " + in.Node + " once"}}, nil
		}
		return health.Verdict{Outcome: health.Pass, Reasons: []string{"test gate passes"}}, nil
	})
	e.runInProcessWith("verbs", func(c *orchestrator.Config) { c.Gate = g })
	e.apply(rollout("verbs", func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
	}))
	nr := e.waitPhase("verbs", 3*time.Minute, v1alpha1.PhaseHalted, v1alpha1.PhaseCompleted)
	if nr.Status.Phase != v1alpha1.PhaseHalted || nodeStatus(nr, bad).State != v1alpha1.NodeFailed {
		t.Fatalf("phase %s, %s %s: want Halted on the gate's failure", nr.Status.Phase, bad, nodeStatus(nr, bad).State)
	}
	oldZtunnel := e.ztunnelPod(skipped).UID

	e.request("verbs", model.VerbSkip, skipped, "disk to be replaced")
	e.waitFor(func(ctx context.Context) bool {
		nr, err := e.rollouts.Get(ctx, "verbs", metav1.GetOptions{})
		return err == nil && nodeStatus(nr, skipped).State == v1alpha1.NodeSkipped
	}, skipped+" Skipped")
	if nr, _ := e.rollouts.Get(context.Background(), "verbs", metav1.GetOptions{}); nr.Status.Phase != v1alpha1.PhaseHalted {
		t.Fatalf("the skip of a pending node ended the halt (phase %s); only a retry or skip of the failed node may", nr.Status.Phase)
	}

	e.request("verbs", model.VerbRetry, bad, "")
	nr = e.waitPhase("verbs", 3*time.Minute, v1alpha1.PhaseCompleted)
	if got := nodeStatus(nr, bad); got.State != v1alpha1.NodeDone || !strings.Contains(got.Verdict, "Pass") {
		t.Errorf("%s after its retry: %s %q, want Done with a passing verdict", bad, got.State, got.Verdict)
	}
	mu.Lock()
	if judged[bad] != 2 {
		t.Errorf("%s judged %d time(s), want 2 (failed, then retried and passed)", bad, judged[bad])
	}
	if judged[skipped] != 0 {
		t.Errorf("the skipped node was judged %d time(s)", judged[skipped])
	}
	mu.Unlock()
	got := nodeStatus(nr, skipped)
	if got.State != v1alpha1.NodeSkipped || !strings.Contains(got.Reason, "skipped by e2e: disk to be replaced") {
		t.Errorf("%s: %s %q, want Skipped naming who and why", skipped, got.State, got.Reason)
	}
	if nr.Status.Counts.Skipped != 1 || nr.Status.Counts.Done != nodes-1 {
		t.Errorf("counts %+v, want %d done and 1 skipped", nr.Status.Counts, nodes-1)
	}
	if p := e.ztunnelPod(skipped); p.UID != oldZtunnel {
		t.Errorf("the skipped node's ztunnel was replaced (%s → %s)", oldZtunnel, p.UID)
	}
	e.waitFor(func(context.Context) bool { return len(e.rolloutEvents("verbs", "NodeRetried")) > 0 }, "the retry's Event")
	if ev := e.rolloutEvents("verbs", "NodeSkipped"); len(ev) == 0 || !strings.Contains(strings.Join(ev, "\n"), skipped) {
		t.Errorf("NodeSkipped Events %q, want one naming %s", ev, skipped)
	}
	if ev := e.rolloutEvents("verbs", "NodeRetried"); len(ev) == 0 || !strings.Contains(strings.Join(ev, "\n"), bad) {
		t.Errorf("NodeRetried Events %q, want one naming %s", ev, bad)
	}
}

// TestSkipInFlightNodeRefused: a skip that reaches the orchestrator while
// its node soaks (the CLI's own check bypassed, as a race with a start
// would) is refused with an Event; the node finishes and the rollout
// completes with nothing skipped.
func TestSkipInFlightNodeRefused(t *testing.T) {
	t.Parallel()
	const nodes = 2
	e := newEnv(t, nodes, 1)
	e.upgrade("1.28.1")
	first := e.c.Nodes[0].Name
	e.runInProcessWith("verbs-inflight", func(c *orchestrator.Config) {
		c.Gate = gate.GateFunc(func(context.Context, gate.GateInput) (health.Verdict, error) {
			return health.Verdict{Outcome: health.Pass, Reasons: []string{"test gate passes"}}, nil
		})
	})
	e.apply(rollout("inflight", func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
		s.Soak = &v1alpha1.Duration{Duration: 20 * time.Second}
	}))
	e.waitFor(func(ctx context.Context) bool {
		n, err := e.c.Client.CoreV1().Nodes().Get(ctx, first, metav1.GetOptions{})
		return err == nil && n.Annotations[model.AnnotationStep] == string(v1alpha1.NodeSoak)
	}, first+" soaking")
	e.request("inflight", model.VerbSkip, first, "should be refused")
	e.waitFor(func(context.Context) bool { return len(e.rolloutEvents("inflight", "NodeRequestRefused")) > 0 }, "the refusal's Event")
	if ev := e.rolloutEvents("inflight", "NodeRequestRefused"); !strings.Contains(ev[0], "in flight (Soak)") {
		t.Fatalf("NodeRequestRefused Events %q, want the skip of %s refused as in flight", ev, first)
	}
	nr := e.waitPhase("inflight", 3*time.Minute, v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted)
	if nr.Status.Phase != v1alpha1.PhaseCompleted || nr.Status.Counts.Skipped != 0 || nodeStatus(nr, first).State != v1alpha1.NodeDone {
		t.Fatalf("phase %s counts %+v, %s %s: want Completed, the soaking node Done, nothing skipped", nr.Status.Phase, nr.Status.Counts, first, nodeStatus(nr, first).State)
	}
}
