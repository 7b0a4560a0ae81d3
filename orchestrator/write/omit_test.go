package write

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/planner"
	"github.com/nodewise/nodewise/test/fleetstatus"
)

// TestFitStatusDegradesInOrder: statuses over the budget even trimmed lose
// whole entries, the passed nodes first (oldest first), then the Pending
// ones (last in the plan first), then the Skipped ones; the entries of
// nodes in flight and failed stay whole; Omitted counts what went, so the
// entries and it add up to the counts.
func TestFitStatusDegradesInOrder(t *testing.T) {
	for _, n := range []int{5000, 12000, 50000} {
		orig := fleetstatus.TwoThirds(n)
		for i := range orig {
			if i%1000 == 999 { // one in a thousand skipped
				orig[i].State, orig[i].Reason = v1alpha1.NodeSkipped, "NotReady"
			}
		}
		s := &v1alpha1.NodeRolloutStatus{Phase: v1alpha1.PhaseProgressing, Nodes: append([]v1alpha1.NodeStatus(nil), orig...)}
		s.Counts = planner.Counts(s.Nodes)
		want := s.Counts
		_, omitted := FitStatus(s)
		size := recorded.status(s)
		t.Logf("%d nodes: %d entries kept, %d omitted (%+v), %d KiB with the field record", n, len(s.Nodes), omitted, s.Omitted, size/1024)
		if size > objectBudget {
			t.Errorf("%d nodes: %d bytes, over the budget %d", n, size, objectBudget)
		}
		if s.Counts != want || s.Omitted == nil || addCounts(s.Omitted, planner.Counts(s.Nodes)) != want {
			t.Fatalf("%d nodes: counts %+v, omitted %+v, listed %+v: want them to add up to %+v", n, s.Counts, s.Omitted, planner.Counts(s.Nodes), want)
		}
		kept := map[string]v1alpha1.NodeStatus{}
		for _, ns := range s.Nodes {
			kept[ns.Name] = ns
		}
		for _, o := range orig[:52] {
			if k, ok := kept[o.Name]; !ok || k.Baseline != o.Baseline || k.Reason != o.Reason || k.Verdict != o.Verdict || (k.StartTime == nil) != (o.StartTime == nil) {
				t.Fatalf("%d nodes: entry %s (%s) not kept whole: %+v", n, o.Name, o.State, k)
			}
		}
		// What is kept of a kind is what goes last of it.
		lastKept := map[v1alpha1.NodeState]int{}
		for i, o := range orig {
			if _, ok := kept[o.Name]; ok {
				lastKept[o.State] = i
			}
		}
		for i, o := range orig {
			_, ok := kept[o.Name]
			switch {
			case o.State == v1alpha1.NodeDone && !ok && lastKept[v1alpha1.NodeDone] > 0 && i > lastKept[v1alpha1.NodeDone]:
				t.Fatalf("%d nodes: passed %s omitted, an older one kept", n, o.Name)
			case o.State == v1alpha1.NodePending && !ok && s.Omitted.Done < want.Done:
				t.Fatalf("%d nodes: Pending %s omitted while passed nodes are listed", n, o.Name)
			case o.State == v1alpha1.NodePending && !ok && i < lastKept[v1alpha1.NodePending]:
				t.Fatalf("%d nodes: Pending %s omitted before a later one", n, o.Name)
			}
		}
	}
	// A status that fits loses nothing.
	small := &v1alpha1.NodeRolloutStatus{Nodes: fleetstatus.TwoThirds(1000)}
	if _, omitted := FitStatus(small); omitted != 0 || small.Omitted != nil || len(small.Nodes) != 1000 {
		t.Errorf("1,000 nodes: %d omitted", omitted)
	}
}

// TestEntryRecordSizeNamesEveryField: the estimate of a node entry's field
// record counts every field of NodeStatus, as the generic walk of the
// entry's JSON does (a field added to NodeStatus must be added to
// entryRecordSize).
func TestEntryRecordSizeNamesEveryField(t *testing.T) {
	var n v1alpha1.NodeStatus
	fill(reflect.ValueOf(&n).Elem())
	n.Name = "node-00001"
	data, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	want := keySize("name", n.Name) + 1 + fieldSetSize(v) + 1
	if got := entryRecordSize(&n); got != want {
		t.Errorf("entryRecordSize = %d, the walk of its JSON %d (%s)", got, want, data)
	}
}

// TestEntryJSONSizeIsTheEncodedSize: the size the writer counts of a node
// entry's JSON, and of a status's, from their fields, is what encoding/json
// writes: every field of NodeStatus set, strings to escape, an unset time.
func TestEntryJSONSizeIsTheEncodedSize(t *testing.T) {
	var full v1alpha1.NodeStatus
	fill(reflect.ValueOf(&full).Elem())
	entries := []v1alpha1.NodeStatus{full, {Name: "n1", State: v1alpha1.NodePending},
		{Name: "n2", State: v1alpha1.NodeFailed, Wave: -12, Reason: "resets 0.2/s → 4.1/s <p&q> \"quoted\" \\ \n\t\x01 \u2028 \xff", StartTime: &metav1.Time{}}}
	for _, n := range entries {
		if got, want := entryJSONSize(&n), jsonSize(&n); got != want {
			t.Errorf("entryJSONSize = %d, encoded %d: %+v", got, want, n)
		}
	}
	s := &v1alpha1.NodeRolloutStatus{Phase: v1alpha1.PhaseHalted, HaltReason: "x", Nodes: fleetstatus.TwoThirds(300)}
	if got, want := statusJSONSize(s), jsonSize(s); got != want {
		t.Errorf("statusJSONSize = %d, encoded %d", got, want)
	}
	if got, want := statusJSONSize(&v1alpha1.NodeRolloutStatus{}), jsonSize(&v1alpha1.NodeRolloutStatus{}); got != want {
		t.Errorf("statusJSONSize of an empty status = %d, encoded %d", got, want)
	}
}

// fill sets every field v holds to a value that is not zero.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(metav1.Time{}) {
			v.Set(reflect.ValueOf(metav1.NewTime(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Float64:
		v.SetFloat(1)
	}
}

// TestStatusOverBudgetKeepsEveryEntryInMemory: the writer writes a degraded
// status but keeps every entry itself: Current (what the passes plan from)
// lists every node, and a later write moves a node the written status
// omits with the counts right.
func TestStatusOverBudgetKeepsEveryEntryInMemory(t *testing.T) {
	const n = 12000
	api := fixture.NewRollouts(testRollout("r"))
	w := NewStatus(t.Context(), api, zap.NewNop())
	fleet := fleetstatus.TwoThirds(n)
	if err := w.Mutate(t.Context(), "r", func(s *v1alpha1.NodeRolloutStatus) { s.Nodes = append(s.Nodes[:0], fleet...) }); err != nil {
		t.Fatal(err)
	}
	stored := api.Stored("r").Status
	if stored.Omitted == nil || len(stored.Nodes) == n || stored.Counts.Total != n {
		t.Fatalf("stored: %d entries, omitted %+v, counts %+v: want degraded, every node counted", len(stored.Nodes), stored.Omitted, stored.Counts)
	}
	cur, _ := w.Current("r", "")
	if len(cur.Nodes) != n || cur.Omitted != nil || cur.Counts != stored.Counts {
		t.Fatalf("Current: %d entries, omitted %+v, counts %+v: want every entry, the stored counts %+v", len(cur.Nodes), cur.Omitted, cur.Counts, stored.Counts)
	}
	last := fmt.Sprintf("node-%05d", n-1) // Pending, omitted
	if err := w.Mutate(t.Context(), "r", setNode(last, v1alpha1.NodePreflight)); err != nil {
		t.Fatal(err)
	}
	stored = api.Stored("r").Status
	if c := stored.Counts; c.Total != n || c.InProgress != 41 || c.Pending != n-2*n/3-1 {
		t.Errorf("counts %+v after %s started: want %d nodes, 41 in flight", c, last, n)
	}
	found := false
	for _, ns := range stored.Nodes {
		found = found || (ns.Name == last && ns.State == v1alpha1.NodePreflight)
	}
	if !found {
		t.Errorf("%s, now in flight, not listed", last)
	}
}

// BenchmarkStatusSize is the status writer's fit (fit: trim, then
// degrade) of a rollout two thirds through at 12,000 and 50,000 nodes, as
// every write makes it once the writer's own copy is trimmed (ns/op; the
// first fit, which trims every entry, is first_fit_ms): the object as
// written (object_bytes) and with the API server's field record of its
// status (stored_bytes, estimated), beside the status's JSON before the fit
// (asis_bytes: what an unbounded write would send), and the entries it
// listed and omitted.
func BenchmarkStatusSize(b *testing.B) {
	for _, n := range []int{12000, 50000} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			nr := testRollout("fleet")
			nr.Spec = v1alpha1.NodeRolloutSpec{MaxParallel: intstr.FromInt32(40), MaxUnavailable: intstr.FromInt32(60), CanaryNodes: []string{"node-00000"}}
			mem := v1alpha1.NodeRolloutStatus{Phase: v1alpha1.PhaseProgressing, Nodes: fleetstatus.TwoThirds(n)}
			mem.Counts = planner.Counts(mem.Nodes)
			asIs := jsonSize(&mem)
			start := time.Now()
			fit(&mem)
			first := time.Since(start)
			var out v1alpha1.NodeRolloutStatus
			var omitted int
			for b.Loop() {
				out, _, omitted, _ = fit(&mem)
			}
			nr.Status = out
			object := jsonSize(nr)
			stored := object + statusRecordSize(&out)
			b.ReportMetric(float64(first.Milliseconds()), "first_fit_ms")
			b.ReportMetric(float64(object), "object_bytes")
			b.ReportMetric(float64(stored), "stored_bytes")
			b.ReportMetric(float64(asIs), "asis_bytes")
			b.ReportMetric(float64(len(out.Nodes)), "listed")
			b.ReportMetric(float64(omitted), "omitted")
			if stored >= 1<<20 || out.Counts.Total != int32(n) {
				b.Errorf("%d nodes: the object with its field record is %d bytes (want under 1 MiB), counts %+v", n, stored, out.Counts)
			}
		})
	}
}
