package orchestrator

import (
	"errors"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/fleet"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/planner"
)

var errWrite = errors.New("this client refuses every write")

// refuseWrites makes the env's clients refuse every write and returns the
// writes they were asked for.
func (e *env) refuseWrites() func() []string {
	var asked []string
	e.kube.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		switch a.GetVerb() {
		case "get", "list", "watch":
			return false, nil, nil
		}
		asked = append(asked, a.GetVerb()+" "+a.GetResource().Resource)
		return true, nil, errWrite
	})
	e.api.Fail = func(verb, name string) error {
		if verb == "get" || verb == "list" {
			return nil
		}
		asked = append(asked, verb+" noderollouts/"+name)
		return errWrite
	}
	return func() []string { return asked }
}

// TestPassDecidesWithoutWriting: the observe and decide phase of a pass
// (fleet.Observer.Pass) writes nothing, over clients that refuse every
// write, whatever the pass then does: start nodes and take Kured's lock,
// act on a node request, record who asked, complete, release a deleted
// rollout, release a finished one's lock. The applier, over the same
// clients, fails: the decided pass has effects to carry out.
func TestPassDecidesWithoutWriting(t *testing.T) {
	deleted := metav1.NewTime(t0)
	for _, tc := range []struct {
		name  string
		hash  string
		mut   func(*v1alpha1.NodeRollout)
		check func(t *testing.T, ps *fleet.Pass)
	}{
		{"starts a node", fixture.OldHash, nil, func(t *testing.T, ps *fleet.Pass) {
			if !slices.ContainsFunc(ps.Decision.Actions, func(a planner.Action) bool { return a.Kind == planner.ActStart }) || len(ps.KuredNodes) != 1 {
				t.Errorf("actions %+v, Kured's lock for %v: want a start, under Kured's lock", ps.Decision.Actions, ps.KuredNodes)
			}
		}},
		{"a node request", fixture.OldHash, func(nr *v1alpha1.NodeRollout) {
			nr.Annotations = map[string]string{model.AnnotationNodeRequest: `{"token":"t1","verb":"skip","node":"n1"}`, model.AnnotationNodeRequestBy: "bob"}
		}, func(t *testing.T, ps *fleet.Pass) {
			if ps.Request == nil || ps.Request.Node != "n1" || len(ps.Requests) != 1 || ps.Requests[0].By != "bob" {
				t.Errorf("request %+v, asked %+v: want bob's skip of n1", ps.Request, ps.Requests)
			}
		}},
		{"completes", fixture.NewHash, nil, func(t *testing.T, ps *fleet.Pass) {
			if ps.Decision.Phase != v1alpha1.PhaseCompleted || ps.NotYet != "" {
				t.Errorf("phase %s (not yet: %q): want Completed", ps.Decision.Phase, ps.NotYet)
			}
		}},
		{"deleted", fixture.OldHash, func(nr *v1alpha1.NodeRollout) {
			nr.DeletionTimestamp, nr.Finalizers = &deleted, []string{model.FinalizerReleaseNodes}
		}, func(t *testing.T, ps *fleet.Pass) {
			if !ps.Deleting || !ps.Policy.Abort || !ps.NoneInFlight() {
				t.Errorf("deleting %v, abort %v: want a deleted rollout aborted, none in flight", ps.Deleting, ps.Policy.Abort)
			}
		}},
		{"finished", fixture.NewHash, func(nr *v1alpha1.NodeRollout) {
			nr.Status = v1alpha1.NodeRolloutStatus{Phase: v1alpha1.PhaseCompleted, ObservedGeneration: nr.Generation}
		}, func(t *testing.T, ps *fleet.Pass) {
			if !ps.Finished {
				t.Error("want the finished pass")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, append(cluster(tc.hash, "n1", "n2"), rollout("r", tc.mut))...)
			writes := e.refuseWrites()
			nr := e.stored("r")
			ps, err := e.ex.observer.Pass(e.ctx, nr, nil)
			if err != nil {
				t.Fatalf("deciding: %v", err)
			}
			if w := writes(); len(w) != 0 {
				t.Fatalf("deciding wrote %v", w)
			}
			tc.check(t, ps)
			if ps.Finished {
				return // its one effect (releasing a lock it may hold) writes nothing here
			}
			acted, err := e.ex.apply.act(e.ctx, nr, ps)
			if err == nil && acted {
				err = e.ex.apply.record(e.ctx, nr, ps)
			}
			if !errors.Is(err, errWrite) || len(writes()) == 0 {
				t.Errorf("applying over clients that refuse writes: err %v, writes %v: want a write refused", err, writes())
			}
		})
	}
}

// TestBlockingAlertsWithoutPrometheusHoldStarts: spec.blocking.alerts under
// a gate that reads no Prometheus (the readiness gate) hold every start,
// saying why: the alerts cannot be read, so the pass fails closed.
func TestBlockingAlertsWithoutPrometheusHoldStarts(t *testing.T) {
	e := newEnv(t, append(cluster(fixture.OldHash, "n1"), rollout("r", func(nr *v1alpha1.NodeRollout) {
		nr.Spec.Blocking = v1alpha1.BlockingSpec{PrometheusAddress: "http://prometheus.monitoring:9090", Alerts: []v1alpha1.BlockingAlert{{Name: "NodeDown"}}}
	}))...)
	ps, err := e.ex.observer.Pass(e.ctx, e.stored("r"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ps.Snap.AlertsBlock, "does not read Prometheus") {
		t.Errorf("alerts block %q: want the starts held because the gate reads no Prometheus", ps.Snap.AlertsBlock)
	}
	if slices.ContainsFunc(ps.Decision.Actions, func(a planner.Action) bool { return a.Kind == planner.ActStart }) {
		t.Errorf("actions %+v: want no start while the blocking alerts cannot be read", ps.Decision.Actions)
	}
}
