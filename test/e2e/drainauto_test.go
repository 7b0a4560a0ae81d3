package e2e

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/kubectl/pkg/util/podutils"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/remote"
	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/orchestrator"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/sim/cluster"
)

// What a synthetic node agent reports about the pods on its node.
const (
	agentOld   = "old"   // the pods in namespace pdb hold connections 10–15 s old
	agentYoung = "young" // only connections under 1 s, but ztunnel's own pod holds old ones
	agentMute  = "mute"  // the agent closes every connection
	agentProc  = "proc"  // proc mode: no connection ages
)

// ageAgents are synthetic node agents behind one HTTPS server (path
// /nodes/<node>/v1/snapshot), read by the orchestrator through the real
// remote.Agent (TLS verified against the server's CA, bearer token).
// Each snapshot lists the pods the API server has on that node, so the
// orchestrator's view of pods and the agent's agree as they would on a node.
type ageAgents struct {
	srv    *httptest.Server
	client *remote.Agent
	start  time.Time

	mu   sync.Mutex
	mode map[string]string
}

const ageAgentToken = "drain-auto-token"

func newAgeAgents(t *testing.T, c *cluster.Cluster, start time.Time) *ageAgents {
	a := &ageAgents{start: start, mode: map[string]string{}}
	a.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { a.serve(w, r, c) }))
	t.Cleanup(a.srv.Close)
	dir := t.TempDir()
	ca, tok := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "token")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tok, []byte(ageAgentToken), 0o600); err != nil {
		t.Fatal(err)
	}
	var err error
	a.client, err = remote.NewAgent(remote.AgentConfig{CAFile: ca, TokenFile: tok, Timeout: time.Second, RetryMax: -1,
		Logger: zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)),
		URLFor: func(_ context.Context, node string) (string, error) { return a.srv.URL + "/nodes/" + node, nil }})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func (a *ageAgents) set(node, mode string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.mode[node] = mode
}

func (a *ageAgents) serve(w http.ResponseWriter, r *http.Request, c *cluster.Cluster) {
	if r.Header.Get("Authorization") != "Bearer "+ageAgentToken {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	node := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/nodes/"), "/v1/snapshot")
	a.mu.Lock()
	mode := a.mode[node]
	a.mu.Unlock()
	if mode == agentMute {
		if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
			conn.Close()
		}
		return
	}
	pods, err := c.Client.CoreV1().Pods("").List(r.Context(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	s := wire.Snapshot{Node: node, Time: time.Now(), StartTime: a.start, Mode: wire.ModeEBPF}
	if mode == agentProc {
		s.Mode = wire.ModeProc
	}
	for _, p := range pods.Items {
		for _, side := range []wire.Side{wire.SideApp, wire.SideProxy} {
			ages := make([]uint64, len(wire.AgeBucketBoundsSeconds)+1)
			ages[0] = 3 // under 1 s
			daemon := dsOf(&p) != ""
			if s.Mode == wire.ModeEBPF && ((mode == agentOld && p.Namespace == "pdb") || (mode == agentYoung && daemon && side == wire.SideProxy)) {
				ages[5] = 2 // [10 s, 15 s)
			}
			if s.Mode == wire.ModeProc {
				ages[0] = 0
			}
			s.Pods = append(s.Pods, wire.PodCounters{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), Side: side, ConnAges: ages})
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(s)
}

// setZtunnelGrace gives the running ztunnel pods a termination grace period
// of sec seconds (template change, then each pod replaced, as OnDelete
// needs), so ztunnel's drain deadline on every node is health.DrainDeadline of it.
func (e *env) setZtunnelGrace(sec int64, nodes int) {
	e.t.Helper()
	ctx := context.Background()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ds, err := e.c.Client.AppsV1().DaemonSets(ns).Get(ctx, cluster.ZtunnelName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ds.Spec.Template.Spec.TerminationGracePeriodSeconds = &sec
		_, err = e.c.Client.AppsV1().DaemonSets(ns).Update(ctx, ds, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
	e.newestHash(cluster.ZtunnelName) // the DaemonSet controller has seen the template
	if err := e.c.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "app=" + cluster.ZtunnelName}); err != nil {
		e.t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := e.c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + cluster.ZtunnelName})
		if err != nil {
			return false, nil
		}
		ready := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || p.Spec.TerminationGracePeriodSeconds == nil || *p.Spec.TerminationGracePeriodSeconds != sec {
				return false, nil
			}
			if podutils.IsPodReady(&p) {
				ready++
			}
		}
		return ready == nodes, nil
	})
	if err != nil {
		e.t.Fatalf("ztunnel pods not replaced with grace %ds: %v", sec, err)
	}
}

// TestDrainAutoDecidesPerNode: drain policy auto reads each node's agent at
// the node's Drain step. A node whose movable pods hold connections older
// than ztunnel's drain deadline is drained; a node where only ztunnel's own
// (DaemonSet) pod holds old connections is swapped in place, its pods
// untouched; a node whose agent does not answer, and one whose agent has no
// ages (proc mode), are drained (fail safe). The decision is persisted before
// it acts: an orchestrator killed while the first node drains (held by a
// PDB) is succeeded by one that keeps draining that node, even though its
// agent now reports no old connections.
func TestDrainAutoDecidesPerNode(t *testing.T) {
	const nodes = 4
	agentStart := time.Now().Add(-time.Minute) // the agents were up before any pod
	e := newEnv(t, nodes, 1)
	agents := newAgeAgents(t, e.c, agentStart)
	old, young, mute, proc := e.c.Nodes[0].Name, e.c.Nodes[1].Name, e.c.Nodes[2].Name, e.c.Nodes[3].Name
	for node, mode := range map[string]string{old: agentOld, young: agentYoung, mute: agentMute, proc: agentProc} {
		agents.set(node, mode)
	}
	e.setZtunnelGrace(2, nodes) // drain deadline 1 s: the test's pods are older than that
	e.blockDrain(old)           // keeps the first node draining until unblockDrain
	e.pinApp("shop", "app", young)
	appUID := func(nsName, label, node string) string {
		pods, err := e.c.Client.CoreV1().Pods(nsName).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + label, FieldSelector: "spec.nodeName=" + node})
		if err != nil || len(pods.Items) != 1 {
			return ""
		}
		return string(pods.Items[0].UID)
	}
	var youngApp string
	_ = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		youngApp = appUID("shop", "app", young)
		return youngApp != "", nil
	})
	guardedApp := appUID("pdb", "guarded", old)
	e.upgrade("1.28.1")
	withAgents := func(c *orchestrator.Config) { c.Agents = agents.client }
	stopFirst, _ := e.runInProcessWith("first", withAgents)
	e.apply(rollout("auto", func(s *v1alpha1.NodeRolloutSpec) {
		s.CanaryNodes = []string{old}
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(2), intstr.FromInt32(2)
		s.Drain = v1alpha1.DrainSpec{Policy: v1alpha1.DrainAuto, PDBBlocked: v1alpha1.PDBWait, Timeout: &v1alpha1.Duration{Duration: 3 * time.Second}}
	}))

	// The first node's decision shows in its status entry, then it waits on the PDB.
	var sawReason string
	var last *v1alpha1.NodeRollout
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		nr, err := e.rollouts.Get(ctx, "auto", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = nr
		if nr.Status.Phase == v1alpha1.PhaseCompleted || nr.Status.Phase == v1alpha1.PhaseHalted {
			return false, errors.New("the rollout ended")
		}
		for _, n := range nr.Status.Nodes {
			if n.Name == old && strings.HasPrefix(n.Reason, "drain auto: ") {
				sawReason = n.Reason
			}
			if n.Name == old && strings.Contains(n.Reason, "PodDisruptionBudget") {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("node %s never waited on its PDB: %v; decision Events %q; last status %+v; node annotations %v", old, err, e.decisionEvents(old), last.Status, e.nodeAnnotations(old))
	}
	if !strings.Contains(sawReason, "drain: connections open longer than 1s (ztunnel's drain deadline 1s cuts what is still open) on pdb/guarded-") || !strings.HasSuffix(sawReason, " (4)") {
		t.Errorf("node %s status reason during Drain %q, want the drain decision naming pdb/guarded's 4 old connections", old, sawReason)
	}
	first := e.nodeAnnotations(old)
	if first[model.AnnotationDrainDecision] != nodestep.DrainDecisionDrain || first[model.AnnotationDrainDecidedAt] == "" {
		t.Fatalf("node %s decision annotations %v, want drain with a time", old, first)
	}

	// Kill the leader mid-drain; the agent now says the node has no old
	// connections. The successor must keep the persisted choice.
	stopFirst()
	agents.set(old, agentYoung)
	e.runInProcessWith("second", withAgents)
	time.Sleep(time.Second)
	e.unblockDrain()
	nr := e.waitPhase("auto", 3*time.Minute, v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted)
	if nr.Status.Phase != v1alpha1.PhaseCompleted || nr.Status.Counts.Done != nodes {
		t.Fatalf("phase %s counts %+v halt %q", nr.Status.Phase, nr.Status.Counts, nr.Status.HaltReason)
	}
	e.assertAllOnNewest(nodes)

	want := map[string]struct {
		decision string
		reason   []string
	}{
		old:   {nodestep.DrainDecisionDrain, []string{"deadline 1s cuts what is still open) on pdb/guarded-", " (4)"}},
		young: {nodestep.DrainDecisionInPlace, []string{"in place: no connection open longer than 1s (ztunnel's drain deadline 1s cuts what is still open) among"}},
		mute:  {nodestep.DrainDecisionDrain, []string{"drain (fail safe): the node agent cannot tell connection ages", "node agent unavailable"}},
		proc:  {nodestep.DrainDecisionDrain, []string{"drain (fail safe): the node agent runs in proc mode"}},
	}
	for node, w := range want {
		ann := e.nodeAnnotations(node)
		if got := ann[model.AnnotationDrainDecision]; got != w.decision {
			t.Errorf("node %s: decision %q, want %q", node, got, w.decision)
		}
		drainedAt, swapSince := ann[model.AnnotationDrainedAt], ann[model.AnnotationSwapSince]
		drained := drainedAt != "" && drainedAt >= swapSince
		if drained != (w.decision == nodestep.DrainDecisionDrain) {
			t.Errorf("node %s: drained-at %q swap-since %q, but the decision was %s", node, drainedAt, swapSince, w.decision)
		}
		msgs := e.decisionEvents(node)
		if len(msgs) != 1 {
			t.Errorf("node %s: %d drain decision Events %q, want exactly 1 (a successor reads the decision back)", node, len(msgs), msgs)
			continue
		}
		for _, s := range w.reason {
			if !strings.Contains(msgs[0], s) {
				t.Errorf("node %s: decision Event %q lacks %q", node, msgs[0], s)
			}
		}
		t.Logf("%s: %s", node, msgs[0])
	}
	if got := e.nodeAnnotations(old)[model.AnnotationDrainDecidedAt]; got != first[model.AnnotationDrainDecidedAt] {
		t.Errorf("node %s decided again after the restart (%s, first at %s)", old, got, first[model.AnnotationDrainDecidedAt])
	}
	if now := appUID("shop", "app", young); now != youngApp {
		t.Errorf("node %s was swapped in place, but its pod shop/app changed (%s → %s): it was evicted", young, youngApp, now)
	}
	if now := appUID("pdb", "guarded", old); now == guardedApp {
		t.Errorf("node %s was drained, but its pod pdb/guarded is the same (%s)", old, now)
	}
	if uns := e.unschedulable(); len(uns) != 0 {
		t.Errorf("cordons left: %v", uns)
	}
}

func (e *env) nodeAnnotations(node string) map[string]string {
	e.t.Helper()
	n, err := e.c.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return n.Annotations
}

// decisionEvents are the messages of the NodewiseDrainDecision Events on a node.
func (e *env) decisionEvents(node string) []string {
	e.t.Helper()
	events, err := e.c.Client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node})
	if err != nil {
		e.t.Fatal(err)
	}
	var msgs []string
	for _, ev := range events.Items {
		if ev.Reason == "NodewiseDrainDecision" {
			msgs = append(msgs, ev.Message)
		}
	}
	return msgs
}
