package worker

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
)

// silences records each Hold and how it ended, with the node's first write
// seen at the Hold (a silence made before the cordon sees none).
type silences struct {
	r   *rig
	log []string
}

func (s *silences) Hold(_ context.Context, nr *v1alpha1.NodeRollout, node string) func(bool) {
	s.log = append(s.log, fmt.Sprintf("hold %s/%s after %d writes", nr.Name, node, len(s.r.nodes.steps())))
	return func(handedBack bool) { s.log = append(s.log, fmt.Sprintf("end handedBack=%v", handedBack)) }
}

// TestSilenceHeldForTheNodesLife: the node's silence is held before its
// first write (the cordon) and ended handed back once the node passes or
// fails; a worker whose context ends (a replica leaving) leaves it to run
// out its TTL.
func TestSilenceHeldForTheNodesLife(t *testing.T) {
	for _, tc := range []struct {
		name    string
		outcome health.Outcome
		cancel  bool
		end     string
	}{
		{"pass", health.Pass, false, "end handedBack=true"},
		{"fail", health.Fail, false, "end handedBack=true"},
		{"context ends in the swap", health.Pass, true, "end handedBack=false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := &judgeGate{verdict: health.Verdict{Outcome: tc.outcome, Reasons: []string{"judged"}}}
			r := newRig(t, g, &fixture.Clock{T: t0, Step: 10 * time.Minute}, func(s *v1alpha1.NodeRolloutSpec) {
				s.Baseline, s.Soak, s.Drain.Policy = v1alpha1.DurationOf(0), v1alpha1.DurationOf(0), v1alpha1.DrainNever
			})
			s := &silences{r: r}
			r.Silences = s
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if tc.cancel {
				r.replace.during, r.replace.hold = cancel, true
			}
			_ = r.drive(ctx)
			if want := []string{"hold r/n1 after 0 writes", tc.end}; !slices.Equal(s.log, want) {
				t.Fatalf("silence %q, want %q", s.log, want)
			}
		})
	}
}
