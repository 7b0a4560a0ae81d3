package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// rolloutsByName serves Get from a map, NotFound otherwise.
type rolloutsByName map[string]*v1alpha1.NodeRollout

func (m rolloutsByName) Get(_ context.Context, name string, _ metav1.GetOptions) (*v1alpha1.NodeRollout, error) {
	if nr, ok := m[name]; ok {
		return nr.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "noderollouts"}, name)
}

func TestExplainNode(t *testing.T) {
	j := &v1alpha1.NodeJudgement{Judgements: 2, ConsecutiveFailures: 2, IntervalOutcome: v1alpha1.OutcomeFail, BaselineSeconds: 600, SoakSeconds: 300,
		PodsCompared: 30, Tests: 170, Regressions: 1, JudgedAt: "2026-11-30T04:00:00Z", Rows: []v1alpha1.JudgementRow{
			{Metric: v1alpha1.MetricResetsReceived, Before: "6.1/s", After: "8.9/s", P: "p=0.210"},
			{Pod: "shop/cart-7d9", Metric: v1alpha1.MetricResetsReceived, Before: "0.2/s", After: "3.1/s", P: "p<0.001", Regressed: true},
		}}
	nr := &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: "mesh"}}
	nr.Status.Nodes = []v1alpha1.NodeStatus{
		{Name: "w1", State: v1alpha1.NodeDone, Verdict: "Pass"},
		{Name: "w2", State: v1alpha1.NodeFailed, Verdict: "Fail: pod shop/cart-7d9: resets received 0.2/s → 3.1/s (p<0.001)", Judgement: j,
			Detail: []string{"enrolled 3/3 (ambient pods in the mesh at the soak's end)", "pod shop/cart-7d9: resets received 0.2/s → 3.1/s, p<0.001",
				"agent clock on node w3 ran up to 2s behind the orchestrator's (tolerance 1s, last measured 2s)"}},
	}
	rollouts := rolloutsByName{"mesh": nr}

	var out bytes.Buffer
	if err := explainNode(context.Background(), rollouts, "mesh", "w2", dataOutput{}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"node w2: state Failed\nverdict: Fail: pod shop/cart-7d9: resets received 0.2/s → 3.1/s (p<0.001)\n", "2 failing in a row", "interval Fail",
		"shop/cart-7d9", "REGRESSED", "0.2/s", "3.1/s", "DETAIL", "\n  agent clock on node w3 ran up to 2s behind"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// -o json is the node's entry: the headline, the detail, the judgement.
	out.Reset()
	if err := explainNode(context.Background(), rollouts, "mesh", "w2", dataOutput{format: "json"}, &out); err != nil {
		t.Fatal(err)
	}
	var entry v1alpha1.NodeStatus
	if err := json.Unmarshal(out.Bytes(), &entry); err != nil || entry.Verdict != nr.Status.Nodes[1].Verdict || len(entry.Detail) != 3 || entry.Judgement == nil || len(entry.Judgement.Rows) != 2 {
		t.Errorf("-o json: %v %s", err, out.String())
	}
	out.Reset()
	if err := explainNode(context.Background(), rollouts, "mesh", "w1", dataOutput{}, &out); err != nil || !strings.Contains(out.String(), "no before/after table recorded") {
		t.Errorf("node without a judgement: %v %q", err, out.String())
	}
	if err := explainNode(context.Background(), rollouts, "mesh", "w9", dataOutput{}, &out); err == nil || !strings.Contains(err.Error(), "its nodes: w1, w2") {
		t.Errorf("unknown node: %v", err)
	}
	if err := explainNode(context.Background(), rollouts, "nope", "w1", dataOutput{}, &out); err == nil || !strings.Contains(err.Error(), "reading NodeRollout nope") {
		t.Errorf("unknown rollout: %v", err)
	}
}

// TestExplainRolloutConformance: explain without --node shows a rollout's
// conformance run beside its phase and reason; without a run it still asks for --node.
func TestExplainRolloutConformance(t *testing.T) {
	nr := &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: "up"}}
	nr.Status.Phase, nr.Status.HaltReason = v1alpha1.PhaseHalted, "conformance Job qa/up-conformance-start-1 timed out: not done after 10m0s; no logs: it has no pod left"
	nr.Status.Conformance = &v1alpha1.ConformanceStatus{Step: "start", Attempt: 1, Namespace: "qa", Job: "up-conformance-start-1", Outcome: v1alpha1.ConformanceFailed, Message: nr.Status.HaltReason}
	var out bytes.Buffer
	if err := explainRollout(context.Background(), rolloutsByName{"up": nr}, "up", &out); err != nil {
		t.Fatal(err)
	}
	want := "NodeRollout up: Halted: conformance Job qa/up-conformance-start-1 timed out: not done after 10m0s; no logs: it has no pod left\n" +
		"conformance start (attempt 1): Job qa/up-conformance-start-1 Failed: conformance Job qa/up-conformance-start-1 timed out"
	if !strings.HasPrefix(out.String(), want) {
		t.Errorf("explain:\n%s\nwant it to start with\n%s", out.String(), want)
	}
	nr.Status.Conformance = nil
	if err := explainRollout(context.Background(), rolloutsByName{"up": nr}, "up", &out); err == nil || !strings.Contains(err.Error(), "--node is required") {
		t.Errorf("without a conformance run: %v, want --node required", err)
	}
}
