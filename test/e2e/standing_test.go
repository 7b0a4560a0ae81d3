package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/orchestrator"
	"github.com/nodewise/nodewise/orchestrator/gate"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/gitops"
	"github.com/nodewise/nodewise/test/testkit"
)

// judges is a gate that records, for each node it judges, the revision
// of the node's ztunnel it judged, and fails while fail is set.
type judges struct {
	e    *env
	fail atomic.Bool
	mu   sync.Mutex
	seen map[string][]string // node → ztunnel revisions judged, in order
}

func (j *judges) gate() gate.Gate {
	return gate.GateFunc(func(ctx context.Context, in gate.GateInput) (health.Verdict, error) {
		pods, err := j.e.c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + in.Node})
		if err != nil {
			return health.Verdict{}, err
		}
		rev := "none"
		for _, p := range pods.Items {
			if dsOf(&p) == cluster.ZtunnelName && p.DeletionTimestamp == nil {
				rev = p.Labels["controller-revision-hash"]
			}
		}
		j.mu.Lock()
		j.seen[in.Node] = append(j.seen[in.Node], rev)
		j.mu.Unlock()
		if j.fail.Load() {
			return health.Verdict{Outcome: health.Fail, Reasons: []string{"test gate refuses " + in.Node}}, nil
		}
		return health.Verdict{Outcome: health.Pass, Reasons: []string{"test gate passes"}}, nil
	})
}

// judged is what the gate judged, "node:rev,rev …", nodes sorted.
func (j *judges) judged() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []string
	for n, revs := range j.seen {
		out = append(out, n+":"+strings.Join(revs, ","))
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

// standingEnv is a cluster of n nodes on 1.27.3 with an orchestrator in
// this process judging through a recording gate.
func standingEnv(t *testing.T, n int) (*env, *judges) {
	e := newEnv(t, n, 1)
	j := &judges{e: e, seen: map[string][]string{}}
	e.runInProcessWith("standing", func(c *orchestrator.Config) { c.Gate = j.gate() })
	return e, j
}

func standingPolicy(name string) *v1alpha1.NodeRollout {
	return rollout(name, func(s *v1alpha1.NodeRolloutSpec) {
		s.Standing = true
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
	})
}

// waitRun waits until the policy's newest run is run n, with the outcome.
func (e *env) waitRun(name string, n int64, outcome v1alpha1.RolloutPhase) *v1alpha1.NodeRollout {
	e.t.Helper()
	var last *v1alpha1.NodeRollout
	e.waitFor(func(ctx context.Context) bool {
		nr, err := e.rollouts.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		last = nr
		return len(nr.Status.Runs) > 0 && nr.Status.Runs[0].Run == n && nr.Status.Runs[0].Outcome == outcome
	}, fmt.Sprintf("NodeRollout %s's run %d to be %s", name, n, outcome))
	return last
}

// runRevision is the ztunnel revision a run rolled.
func runRevision(r v1alpha1.RunRecord) string {
	for _, t := range r.Targets {
		if t.Name == cluster.ZtunnelName {
			return t.Revision
		}
	}
	return ""
}

// TestStandingPolicyRollsEachRevision: one standing policy, applied once,
// rolls revision 2 (1.28.1) and then, when it appears later, revision 3
// (1.28.2), each node judged on each, and goes Idle after each run; its
// status keeps both runs, newest first; `nodewise plan` of its file names
// them; Argo CD reads it Healthy and kstatus Current between runs.
func TestStandingPolicyRollsEachRevision(t *testing.T) {
	t.Parallel()
	const nodes = 2
	e, j := standingEnv(t, nodes)
	e.upgrade("1.28.1")
	rev2 := e.newestHash(cluster.ZtunnelName)
	e.apply(standingPolicy("standing"))
	nr := e.waitRun("standing", 1, v1alpha1.PhaseCompleted)
	e.waitPhase("standing", time.Minute, v1alpha1.PhaseIdle)
	e.assertAllOnNewest(nodes)
	if got := runRevision(nr.Status.Runs[0]); got != rev2 {
		t.Errorf("run 1 rolled ztunnel revision %q, want %s", got, rev2)
	}

	e.upgrade("1.28.2") // the next chart, as a GitOps sync applies it: no NodeRollout touched
	rev3 := e.newestHash(cluster.ZtunnelName)
	nr = e.waitRun("standing", 2, v1alpha1.PhaseCompleted)
	nr = e.waitPhase("standing", time.Minute, v1alpha1.PhaseIdle)
	e.assertAllOnNewest(nodes)
	if len(nr.Status.Runs) != 2 || runRevision(nr.Status.Runs[0]) != rev3 || runRevision(nr.Status.Runs[1]) != rev2 {
		t.Fatalf("runs %+v; want run 2 of %s, then run 1 of %s", nr.Status.Runs, rev3, rev2)
	}
	if r1, r2 := nr.Status.Runs[1], nr.Status.Runs[0]; r1.CompletionTime == nil || r2.StartTime.Before(r1.CompletionTime) {
		t.Errorf("run 2 began at %v, before run 1 completed at %v", r2.StartTime, r1.CompletionTime)
	}
	var want []string
	for _, n := range e.c.Nodes {
		want = append(want, n.Name+":"+rev2+","+rev3)
	}
	slices.Sort(want)
	if got := j.judged(); got != strings.Join(want, " ") {
		t.Errorf("the gate judged %s; want each node once on each revision: %s", got, strings.Join(want, " "))
	}
	// The policy's file, planned again: the plan says it stands, and
	// names the applied policy's last runs.
	pol := standingPolicy("standing")
	pol.TypeMeta = metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeRollout"}
	manifest, err := yaml.Marshal(pol)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "standing.yaml")
	if err := os.WriteFile(file, manifest, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(testkit.Binary(t, "nodewise"), "--kubeconfig", e.c.Kubeconfig, "plan", "-f", file).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Standing policy:") || !strings.Contains(string(out), "runs: #2 Completed") {
		t.Errorf("nodewise plan -f of the policy (%v):\n%s\nwant the standing line and run 2 Completed", err, out)
	}

	// Between runs, GitOps tools see it healthy, not finished for good.
	rd := gitops.NewChecker(t, context.Background(), e.c.Client, e.c.Config, "NodeRollout").Expect("standing", "Healthy", status.CurrentStatus)
	if !strings.Contains(rd.Argo.Message, "Idle") || !strings.Contains(rd.Argo.Message, "run 2 Completed") {
		t.Errorf("Argo CD says %q of the idle policy; want Idle and run 2 Completed", rd.Argo.Message)
	}
}

// TestStandingPolicyStopsOffOnDelete: a standing policy whose ztunnel
// DaemonSet is switched to RollingUpdate stops (Pending, OnDelete False
// naming the DaemonSet and the fix: Degraded in Argo CD, Failed in kstatus,
// both saying so) and starts no run for a new istio-cni revision
// meanwhile; back on OnDelete, it rolls it.
func TestStandingPolicyStopsOffOnDelete(t *testing.T) {
	t.Parallel()
	e, _ := standingEnv(t, 1)
	ctx := context.Background()
	e.upgrade("1.28.1")
	e.apply(standingPolicy("gitops"))
	e.waitRun("gitops", 1, v1alpha1.PhaseCompleted)
	e.waitPhase("gitops", time.Minute, v1alpha1.PhaseIdle)

	strategy := func(typ string) {
		patch := `{"spec":{"updateStrategy":{"type":"OnDelete","rollingUpdate":null}}}`
		if typ == "RollingUpdate" {
			patch = `{"spec":{"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":1}}}}`
		}
		if _, err := e.c.Client.AppsV1().DaemonSets(ns).Patch(ctx, cluster.ZtunnelName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	strategy("RollingUpdate")
	nr := e.waitPhase("gitops", time.Minute, v1alpha1.PhasePending)
	e.waitFor(func(ctx context.Context) bool {
		nr, _ = e.rollouts.Get(ctx, "gitops", metav1.GetOptions{})
		return nr != nil && meta.IsStatusConditionFalse(nr.Status.Conditions, "OnDelete")
	}, "condition OnDelete False")
	c := meta.FindStatusCondition(nr.Status.Conditions, "OnDelete")
	if !strings.Contains(c.Message, "DaemonSet istio-system/"+cluster.ZtunnelName+" uses updateStrategy RollingUpdate") || !strings.Contains(c.Message, "updateStrategy.type=OnDelete") {
		t.Errorf("condition OnDelete says %q; want the DaemonSet named and the fix", c.Message)
	}
	rd := gitops.NewChecker(t, ctx, e.c.Client, e.c.Config, "NodeRollout").Expect("gitops", "Degraded", status.FailedStatus)
	if rd.Argo.Message != c.Message || rd.KstatusMessage != c.Message {
		t.Errorf("off OnDelete: Argo CD says %q, kstatus %q; want both %q", rd.Argo.Message, rd.KstatusMessage, c.Message)
	}

	before := podUIDs(t, e, e.c.Nodes[0].Name)
	e.setImageTag(cluster.CNIName, "1.28.2") // a new istio-cni revision, its DaemonSet still on OnDelete
	rev := e.newestHash(cluster.CNIName)
	time.Sleep(2 * time.Second) // passes (resync 500 ms) that must start nothing
	nr, err := e.rollouts.Get(ctx, "gitops", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if nr.Status.Phase != v1alpha1.PhasePending || len(nr.Status.Runs) != 1 {
		t.Errorf("off OnDelete, after a new revision: phase %s, %d runs; want Pending, still 1 run", nr.Status.Phase, len(nr.Status.Runs))
	}
	if after := podUIDs(t, e, e.c.Nodes[0].Name); !slices.Equal(before, after) {
		t.Errorf("off OnDelete, the node's data-plane pods were replaced: %v → %v", before, after)
	}

	strategy("OnDelete")
	nr = e.waitRun("gitops", 2, v1alpha1.PhaseCompleted)
	for _, tgt := range nr.Status.Runs[0].Targets {
		if tgt.Name == cluster.CNIName && tgt.Revision != rev {
			t.Errorf("run 2 rolled istio-cni revision %s, want %s", tgt.Revision, rev)
		}
	}
	e.assertAllOnNewest(1)
}

// TestStandingPolicyHaltBlocksNextRun: a standing policy's run halted by
// its judge stays halted when the next revision appears (no node starts,
// no run begins) until a person resumes it; the resumed run goes on to the
// newest revision and the policy goes Idle.
func TestStandingPolicyHaltBlocksNextRun(t *testing.T) {
	t.Parallel()
	const nodes = 2
	e, j := standingEnv(t, nodes)
	ctx := context.Background()
	j.fail.Store(true)
	e.upgrade("1.28.1")
	e.apply(standingPolicy("blocked"))
	nr := e.waitRun("blocked", 1, v1alpha1.PhaseHalted)
	if !strings.Contains(nr.Status.Runs[0].Reason, "test gate refuses") {
		t.Errorf("run 1's reason %q; want the gate's", nr.Status.Runs[0].Reason)
	}

	e.upgrade("1.28.2")
	rev3 := e.newestHash(cluster.ZtunnelName)
	judged := j.judged()
	time.Sleep(2 * time.Second) // passes (resync 500 ms) that must start nothing
	nr, err := e.rollouts.Get(ctx, "blocked", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if nr.Status.Phase != v1alpha1.PhaseHalted || len(nr.Status.Runs) != 1 || nr.Status.Runs[0].Outcome != v1alpha1.PhaseHalted {
		t.Fatalf("after the next revision: phase %s, runs %+v; want still Halted, one run", nr.Status.Phase, nr.Status.Runs)
	}
	if got := j.judged(); got != judged {
		t.Errorf("the gate judged more while halted: %s → %s", judged, got)
	}
	for _, n := range nr.Status.Nodes {
		if n.State != v1alpha1.NodePending && n.State != v1alpha1.NodeFailed {
			t.Errorf("node %s is %s while the run is halted", n.Name, n.State)
		}
	}

	j.fail.Store(false)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, model.AnnotationResumeToken, time.Now().UTC().Format(time.RFC3339Nano))
	if _, err := e.rollouts.Patch(ctx, "blocked", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	nr = e.waitRun("blocked", 1, v1alpha1.PhaseCompleted)
	if got := runRevision(nr.Status.Runs[0]); got != rev3 {
		t.Errorf("the resumed run rolled ztunnel revision %q, want the newest %s", got, rev3)
	}
	e.waitPhase("blocked", time.Minute, v1alpha1.PhaseIdle)
	e.assertAllOnNewest(nodes)
}
