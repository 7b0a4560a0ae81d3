package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/nodewise/nodewise/health"
)

func TestExplainNode(t *testing.T) {
	sum := health.Summary{Judgements: 2, ConsecutiveFailures: 2, IntervalOutcome: health.Fail, BaselineSeconds: 600, SoakSeconds: 300,
		PodsCompared: 30, Tests: 170, Regressions: 1, JudgedAt: "2026-11-30T04:00:00Z", Rows: []health.SummaryRow{
			{Metric: health.MetricResetsReceived, Before: "6.1/s", After: "8.9/s", P: "p=0.210"},
			{Pod: "shop/cart-7d9", Metric: health.MetricResetsReceived, Before: "0.2/s", After: "3.1/s", P: "p<0.001", Regressed: true},
		}}
	var js map[string]any
	b, _ := json.Marshal(sum)
	_ = json.Unmarshal(b, &js)
	nr := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nodewise.io/v1alpha1", "kind": "NodeRollout", "metadata": map[string]any{"name": "mesh"},
		"status": map[string]any{"nodes": []any{
			map[string]any{"name": "w1", "state": "Done", "verdict": "Pass"},
			map[string]any{"name": "w2", "state": "Failed", "verdict": "Fail: pod shop/cart-7d9: resets received 0.2/s → 3.1/s, p<0.001", "judgement": js},
		}},
	}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{nodeRolloutsGVR: "NodeRolloutList"}, nr)

	var out bytes.Buffer
	if err := explainNode(context.Background(), dyn, "mesh", "w2", &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"node w2: state Failed", "2 failing in a row", "shop/cart-7d9", "REGRESSED", "0.2/s", "3.1/s"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := explainNode(context.Background(), dyn, "mesh", "w1", &out); err != nil || !strings.Contains(out.String(), "no before/after table recorded") {
		t.Errorf("node without a judgement: %v %q", err, out.String())
	}
	if err := explainNode(context.Background(), dyn, "mesh", "w9", &out); err == nil || !strings.Contains(err.Error(), "its nodes: w1, w2") {
		t.Errorf("unknown node: %v", err)
	}
	if err := explainNode(context.Background(), dyn, "nope", "w1", &out); err == nil || !strings.Contains(err.Error(), "reading NodeRollout nope") {
		t.Errorf("unknown rollout: %v", err)
	}
}
