package orchestrator

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/status"
)

// TestViewsPassesMergeAsAFullPass: after plan-moving changes, each followed
// by the views pass it starts (pending nodes going NotReady, some Ready
// again: held, then no longer), the status written is the one a full pass
// writes from the same caches, entry by entry and in its counts and
// gauges.
func TestViewsPassesMergeAsAFullPass(t *testing.T) {
	f := newBenchFleet(t, 300)
	for i := range 12 {
		f.change("pending-notready", i%8) // the first 4 of 8 nodes go NotReady and back, the rest stay NotReady
		f.ex.reconcileChanged(f.ctx)
		f.flush()
	}
	got := f.api.Stored(f.nr.Name).Status
	held := 0
	for _, ns := range got.Nodes {
		if ns.State == v1alpha1.NodePending && ns.Reason != "" {
			held++
		}
	}
	if held != 4 {
		t.Errorf("%d entries say why they wait, want the 4 nodes left NotReady", held)
	}
	gauges := gaugeValues(t, f.env)
	f.ex.reconcileAll(f.ctx)
	f.flush()
	want := f.api.Stored(f.nr.Name).Status
	if !status.Same(got, want) {
		for i := range min(len(got.Nodes), len(want.Nodes)) {
			if g, w := got.Nodes[i], want.Nodes[i]; g.Name != w.Name || g.State != w.State || g.Reason != w.Reason || g.Wave != w.Wave {
				t.Errorf("entry %d after the views passes %+v, after a full pass %+v", i, got.Nodes[i], want.Nodes[i])
			}
		}
		t.Errorf("status after the views passes: %d entries, counts %+v; after a full pass: %d, %+v", len(got.Nodes), got.Counts, len(want.Nodes), want.Counts)
	}
	if after := gaugeValues(t, f.env); after != gauges {
		t.Errorf("node-state gauges after the views passes:\n%s\nafter a full pass:\n%s", gauges, after)
	}
}

// gaugeValues are the node-state gauges as Prometheus would read them.
func gaugeValues(t *testing.T, e *env) string {
	t.Helper()
	var out string
	for _, c := range []prometheus.Collector{e.ex.metrics.NodeState, e.ex.metrics.NodesByState} {
		b, err := testutil.CollectAndFormat(c, expfmt.TypeTextPlain, "nodewise_rollout_node_state", "nodewise_rollout_nodes")
		if err != nil {
			t.Fatal(err)
		}
		out += string(b)
	}
	return out
}
