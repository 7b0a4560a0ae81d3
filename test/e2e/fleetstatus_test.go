package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/write"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/fleetstatus"
	"github.com/nodewise/nodewise/test/testkit"
)

// num is a JSON number of an unstructured object as an int.
func num(v any) int {
	switch n := v.(type) {
	case int64:
		return int(n)
	case float64:
		return int(n)
	}
	return -1
}

var noderolloutsGVR = schema.GroupVersionResource{Group: v1alpha1.GroupVersion.Group, Version: v1alpha1.GroupVersion.Version, Resource: "noderollouts"}

// storedObject is the NodeRollout as the API server holds it (managedFields
// included), as JSON, and its status decoded.
func storedObject(t *testing.T, dc dynamic.Interface, name string) (int, map[string]any) {
	t.Helper()
	u, err := dc.Resource(noderolloutsGVR).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	status, _ := u.Object["status"].(map[string]any)
	return len(data), status
}

// TestFleetStatusLandsOnTheAPIServer: the status of a 12,000-node rollout
// two thirds through, then with every node done but those in flight and
// failed, is written through the status subresource of a real API server
// (etcd at its default 1.5 MiB request limit), and the object stays under
// 1 MiB: degraded to counts plus the entries of the nodes in
// flight (baseline and control records, counters and start times intact:
// what a successor resumes them with) and failed, saying how many it
// omits. A successor leader's writer, which reads that degraded status
// back, moves a node on with the counts still counting every node.
func TestFleetStatusLandsOnTheAPIServer(t *testing.T) {
	t.Parallel()
	const nodes = 12000
	c := cluster.Start(t, cluster.Options{Nodes: 1})
	cluster.InstallCRDs(t, c, testkit.CRD(testkit.NodeRolloutsCRD))
	nwc, err := v1alpha1.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := nwc.NodeRollouts().Create(ctx, &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: "fleet"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fleet := fleetstatus.TwoThirds(nodes)
	done := append([]v1alpha1.NodeStatus(nil), fleet...) // every node done but those in flight and failed
	for i := range done {
		if done[i].State == v1alpha1.NodePending {
			at := &metav1.Time{Time: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Second)}
			done[i].State, done[i].StateSince, done[i].StartTime, done[i].FinishTime = v1alpha1.NodeDone, at, at, at
			done[i].Verdict = "Pass: no regression in 40 tests over 12 pods (5m0s baseline, 5m0s soak)"
		}
	}
	leader := write.NewStatus(ctx, nwc.NodeRollouts(), zap.NewNop())
	for _, stage := range []struct {
		name  string
		nodes []v1alpha1.NodeStatus
		done  int
	}{{"two thirds through", fleet, 2*nodes/3 - 52}, {"all done but 52", done, nodes - 52}} {
		if err := leader.Mutate(ctx, "fleet", func(s *v1alpha1.NodeRolloutStatus) {
			s.Phase = v1alpha1.PhaseProgressing
			s.Nodes = append(s.Nodes[:0], stage.nodes...)
		}); err != nil {
			t.Errorf("%s: writing the status of a %d-node rollout: %v", stage.name, nodes, err)
			continue
		}
		size, status := storedObject(t, dc, "fleet")
		t.Logf("%s: stored object %d KiB, %d entries listed", stage.name, size/1024, len(status["nodes"].([]any)))
		if size >= 1<<20 {
			t.Errorf("%s: the stored object is %d bytes, not under 1 MiB", stage.name, size)
		}
		counts, _ := status["counts"].(map[string]any)
		omitted, _ := status["omitted"].(map[string]any)
		if num(counts["total"]) != nodes || num(counts["done"]) != stage.done || num(counts["inProgress"]) != 40 || num(counts["failed"]) != 12 || omitted == nil {
			t.Errorf("%s: counts %v, omitted %v: want all %d nodes counted (%d done, 40 in flight, 12 failed), the status saying it omits some", stage.name, counts, omitted, nodes, stage.done)
			continue
		}
		listed := map[string]map[string]any{}
		for _, e := range status["nodes"].([]any) {
			m := e.(map[string]any)
			listed[m["name"].(string)] = m
		}
		if len(listed)+num(omitted["total"]) != nodes {
			t.Errorf("%s: %d entries listed and %v omitted: want %d together", stage.name, len(listed), omitted["total"], nodes)
		}
		for _, ns := range fleet[:52] {
			e := listed[ns.Name]
			if e == nil || e["state"] != string(ns.State) {
				t.Fatalf("%s: entry of %s (%s) not kept: %v", stage.name, ns.Name, ns.State, e)
			}
			if ns.State == v1alpha1.NodeSoak && (e["baseline"] != ns.Baseline || e["controls"] != ns.Controls || e["startTime"] == nil || e["judgement"] == nil) {
				t.Errorf("%s: in-flight entry %s lost what a successor resumes it with: %v", stage.name, ns.Name, e)
			}
			if ns.State == v1alpha1.NodeFailed && (e["reason"] != ns.Reason || e["verdict"] != ns.Verdict) {
				t.Errorf("%s: failed entry %s lost its reason or verdict: %v", stage.name, ns.Name, e)
			}
		}
	}
	if t.Failed() {
		return
	}

	// A successor reads the degraded status back and moves node-00000 on.
	successor := write.NewStatus(ctx, nwc.NodeRollouts(), zap.NewNop())
	if err := successor.Mutate(ctx, "fleet", func(s *v1alpha1.NodeRolloutStatus) { model.NodeEntry(s, "node-00000").State = v1alpha1.NodeDone }); err != nil {
		t.Fatalf("the successor's write: %v", err)
	}
	size, status := storedObject(t, dc, "fleet")
	counts, _ := status["counts"].(map[string]any)
	if size >= 1<<20 || num(counts["total"]) != nodes || num(counts["inProgress"]) != 39 || num(counts["done"]) != nodes-52+1 {
		t.Errorf("after the successor's write: %d bytes, counts %v; want every node counted, one more done", size, counts)
	}
	cur, ok := successor.Current("fleet", "")
	if !ok || cur.Counts.Total != nodes || cur.Counts.InProgress != 39 {
		t.Errorf("the successor's status: counts %+v", cur.Counts)
	}
}
