package planner

import (
	"bytes"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// TestRenderStatusSaysItIsDegraded: a status that omits entries (over its
// budget) says so under the headline, with how many nodes it lists and
// the omitted ones' counts by state; a whole status says nothing of it.
func TestRenderStatusSaysItIsDegraded(t *testing.T) {
	nr := &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: "fleet"}, Status: v1alpha1.NodeRolloutStatus{
		Phase:   v1alpha1.PhaseProgressing,
		Counts:  v1alpha1.RolloutCounts{Total: 12000, Done: 7949, InProgress: 40, Failed: 12, Pending: 3999},
		Omitted: &v1alpha1.RolloutCounts{Total: 11900, Done: 7949, Pending: 3951},
		Nodes:   []v1alpha1.NodeStatus{{Name: "node-00001", State: v1alpha1.NodeSoak}},
	}}
	var buf bytes.Buffer
	if err := RenderStatus(&buf, nr, time.Now()); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(buf.String(), "\n")
	want := "DEGRADED: the status is over its size budget and lists 100 of 12000 nodes (in flight and failed first); not listed: 7949 done, 3951 pending"
	if len(lines) < 2 || !strings.HasPrefix(lines[1], want) {
		t.Errorf("second line %q, want it to start %q", lines[1], want)
	}
	nr.Status.Omitted = nil
	buf.Reset()
	if err := RenderStatus(&buf, nr, time.Now()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(buf.String(), "DEGRADED") {
		t.Errorf("a whole status rendered as degraded:\n%s", buf.String())
	}
}
