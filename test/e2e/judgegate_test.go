package e2e

// The judge gate end to end on the simulated cluster (sim/cluster: real etcd, kube-apiserver,
// controller-manager and scheduler): the orchestrator rolls ztunnel and
// istio-cni node by node, and its soak step is judged by the real judge
// through judgegate, reading synthetic node agents over HTTPS with the real
// AgentClient (TLS + bearer token).

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/health/record"
	"github.com/nodewise/nodewise/health/remote"
	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/orchestrator"
	"github.com/nodewise/nodewise/orchestrator/judgegate"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/testkit"
)

const (
	e2eNodes    = 6
	e2eBaseline = 3 * time.Second
	e2eSoak     = 3 * time.Second
	agentToken  = "e2e-token"
)

// fleet is one synthetic node agent per simulated node, served by one HTTPS
// server (path /nodes/<node>/v1/snapshot). Counters grow smoothly with time;
// a node can regress (one pod's resets ×5 from its ztunnel swap on) or stop
// answering (from its swap on). Once keepHistory starts, each agent also
// keeps a snapshot every period and serves them at /v1/history, as the node
// agent does; before, /v1/history is a 404, as from an agent that keeps none.
type fleet struct {
	srv   *httptest.Server
	start time.Time

	mu      sync.Mutex
	swapped map[string]time.Time // node → when its old ztunnel pod was deleted
	regress map[string]bool
	// unenroll: the node's agent checks enrollment (every snapshot carries
	// one, every app pod enrolled), and pod 3 loses its HBONE listener
	// from the node's swap on.
	unenroll map[string]bool
	mute     map[string]bool
	served   map[string]int
	byIP     map[string]string          // node InternalIP → node, for serveOnNodes
	kept     map[string][]wire.Snapshot // node → its history, oldest first (keepHistory)
}

func newFleet(t testing.TB) *fleet {
	f := &fleet{start: time.Now().Add(-time.Minute), swapped: map[string]time.Time{}, regress: map[string]bool{}, unenroll: map[string]bool{}, mute: map[string]bool{}, served: map[string]int{}}
	f.srv = httptest.NewTLSServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fleet) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+agentToken {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	node, path, ok := f.nodeOf(r)
	if !ok {
		http.NotFound(w, r)
		return
	}
	f.mu.Lock()
	_, swapped := f.swapped[node]
	mute := f.mute[node]
	f.served[node]++
	f.mu.Unlock()
	if mute && swapped {
		hj, _ := w.(http.Hijacker)
		if conn, _, err := hj.Hijack(); err == nil {
			conn.Close() // the agent stopped answering
		}
		return
	}
	var body any = f.snapshot(node, time.Now())
	if path == "/v1/cni" {
		body = f.cni(node, r.URL.Query().Get("version"))
	}
	if path == "/v1/history" {
		h, ok := f.history(node, r.URL.Query().Get("since"))
		if !ok {
			http.NotFound(w, r)
			return
		}
		body = h
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(body)
}

// snapshot is the node's agent's snapshot at now.
func (f *fleet) snapshot(node string, now time.Time) wire.Snapshot {
	f.mu.Lock()
	swap, swapped := f.swapped[node]
	regress, unenroll := f.regress[node], f.unenroll[node]
	f.mu.Unlock()
	secs := now.Sub(f.start).Seconds()
	s := wire.Snapshot{Node: node, Time: now, StartTime: f.start, Mode: wire.ModeEBPF}
	if unenroll {
		s.Enrollment = &wire.Enrollment{Time: now, Ztunnel: "pid 4242"}
	}
	for i := range 11 { // ten workload pods and the probe
		c := wire.PodCounters{Namespace: "shop", Name: fmt.Sprintf("%s-app-%d", node, i), UID: fmt.Sprintf("%s-%d", node, i), Side: wire.SideApp,
			ConnectLatency: wire.Log2Histogram{Buckets: make([]uint64, wire.Log2Buckets)},
			SRTT:           wire.Log2Histogram{Buckets: make([]uint64, wire.Log2Buckets)},
			ConnAges:       make([]uint64, len(wire.AgeBucketBoundsSeconds)+1)}
		c.Connects = uint64(50 * secs)
		c.Accepts = uint64(50 * secs)
		c.ResetsReceived = uint64(10 * secs)
		if regress && swapped && i == 3 {
			c.ResetsReceived += uint64(40 * now.Sub(swap).Seconds())
		}
		c.ResetsSent = uint64(5 * secs)
		c.Retransmits = uint64(20 * secs)
		c.ConnectLatency.Buckets[9] = uint64(25 * secs)
		c.ConnectLatency.Buckets[10] = uint64(25 * secs)
		c.SRTT.Buckets[8] = uint64(100 * secs)
		if i == 10 {
			c.Namespace, c.Name = health.DefaultProbeNamespace, "nodewise-probe-"+node
		}
		s.Pods = append(s.Pods, c)
		if s.Enrollment != nil {
			pe := wire.PodEnrollment{Namespace: c.Namespace, Name: c.Name, UID: c.UID, Result: wire.Enrolled}
			if swapped && i == 3 {
				pe.Result, pe.Failed, pe.Detail = wire.NotEnrolled, wire.CheckListeners, "nothing listens on 15008"
			}
			s.Enrollment.Pods = append(s.Enrollment.Pods, pe)
		}
	}
	return s
}

// keepHistory has every node's agent keep a snapshot now and every period
// (for an hour at most, the node agent's default) until the test ends.
func (f *fleet) keepHistory(t testing.TB, nodes []cluster.NodeSpec, every time.Duration) {
	const keep = time.Hour
	take := func() {
		now := time.Now()
		snaps := make([]wire.Snapshot, 0, len(nodes))
		for _, n := range nodes {
			snaps = append(snaps, f.snapshot(n.Name, now))
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, s := range snaps {
			h := append(f.kept[s.Node], s)
			for len(h) > 0 && h[0].Time.Before(now.Add(-keep)) {
				h = h[1:]
			}
			f.kept[s.Node] = h
		}
	}
	f.mu.Lock()
	f.kept = map[string][]wire.Snapshot{}
	f.mu.Unlock()
	take()
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				take()
			}
		}
	}()
}

// history is what the node's agent serves at /v1/history?since=: false
// when it keeps none (keepHistory not started).
func (f *fleet) history(node, since string) (wire.History, bool) {
	from, _ := time.Parse(time.RFC3339Nano, since)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.kept == nil {
		return wire.History{}, false
	}
	h := wire.History{Node: node, StartTime: f.start, Now: time.Now(), Every: time.Second, Keep: time.Hour}
	for _, s := range f.kept[node] {
		if !s.Time.Before(from) {
			h.Snapshots = append(h.Snapshots, s)
		}
	}
	return h, true
}

// cni is istio-cni's health as the node's agent serves it at /v1/cni: every
// check passes, and the plugin reports the version asked for, as on a node
// whose istio-cni is sound (the fleet fakes the data plane, not its faults:
// the live tests and cnitoken_test.go show the agent's own checks failing).
func (f *fleet) cni(node, version string) wire.CNIHealth {
	h := wire.CNIHealth{Node: node, Time: time.Now(), Expected: version}
	for _, c := range []string{wire.CNICheckConfig, wire.CNICheckKubeconfig, wire.CNICheckToken, wire.CNICheckPlugin} {
		h.Checks = append(h.Checks, wire.CNICheck{Check: c, File: "/etc/cni/net.d", OK: true, Detail: "fleet: sound"})
	}
	return h
}

// nodeOf is the node a request is for and the agent's path it asks
// (/v1/snapshot, /v1/history or /v1/cni): /nodes/<node>/<path> on the test's own
// URL, or <path> on a node's InternalIP (serveOnNodes).
func (f *fleet) nodeOf(r *http.Request) (string, string, bool) {
	for _, path := range []string{"/v1/snapshot", "/v1/history", "/v1/cni"} {
		if rest, ok := strings.CutPrefix(r.URL.Path, "/nodes/"); ok {
			if node, ok := strings.CutSuffix(rest, path); ok {
				return node, path, true
			}
			continue
		}
		if r.URL.Path != path {
			continue
		}
		local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		tcp, _ := local.(*net.TCPAddr)
		if tcp == nil {
			return "", "", false
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		node, ok := f.byIP[tcp.IP.String()]
		return node, path, ok
	}
	return "", "", false
}

// serveOnNodes also serves each node's agent where the orchestrator binary
// looks for it: https://<node InternalIP>:<port>/v1/snapshot, with the
// test server's certificate (valid for example.com). It returns the port.
func (f *fleet) serveOnNodes(t testing.TB, c *cluster.Cluster) int {
	t.Helper()
	for attempt := 0; ; attempt++ {
		port, lns, err := listenOnAll(c.Nodes)
		if err != nil {
			if attempt < 5 {
				continue // the port taken on another node IP: another port
			}
			t.Fatalf("listening on the node IPs: %v", err)
		}
		f.mu.Lock()
		f.byIP = map[string]string{}
		for _, n := range c.Nodes {
			f.byIP[n.IP] = n.Name
		}
		f.mu.Unlock()
		srv := &http.Server{Handler: http.HandlerFunc(f.serve), TLSConfig: f.srv.TLS.Clone(), ReadHeaderTimeout: 5 * time.Second}
		for _, ln := range lns {
			go func() { _ = srv.ServeTLS(ln, "", "") }()
		}
		t.Cleanup(func() { _ = srv.Close() })
		return port
	}
}

// listenOnAll listens on one port on every node's IP.
func listenOnAll(nodes []cluster.NodeSpec) (int, []net.Listener, error) {
	first, err := net.Listen("tcp", net.JoinHostPort(nodes[0].IP, "0"))
	if err != nil {
		return 0, nil, err
	}
	port := first.Addr().(*net.TCPAddr).Port
	lns := []net.Listener{first}
	for _, n := range nodes[1:] {
		ln, err := net.Listen("tcp", net.JoinHostPort(n.IP, strconv.Itoa(port)))
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return 0, nil, err
		}
		lns = append(lns, ln)
	}
	return port, lns, nil
}

// watchSwaps marks a node swapped when its old ztunnel pod is deleted.
func (f *fleet) watchSwaps(t testing.TB, c *cluster.Cluster) {
	inf := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithNamespace(cluster.IstioNamespace))
	pods := inf.Core().V1().Pods().Informer()
	_, _ = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Labels["app"] != cluster.ZtunnelName || p.Spec.NodeName == "" {
			return
		}
		f.mu.Lock()
		if _, done := f.swapped[p.Spec.NodeName]; !done {
			f.swapped[p.Spec.NodeName] = time.Now()
		}
		f.mu.Unlock()
	}})
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	inf.Start(stop)
	inf.WaitForCacheSync(stop)
}

// The gate is wired as cmd/orchestrator wires it: the orchestrator calls
// Prepare at each node's preflight, sets GateInput.SwapStart at the cordon and
// the drain facts, and persists the judge's summary in status.nodes[].judgement.
type e2e struct {
	c       *cluster.Cluster
	f       *fleet
	rolls   v1alpha1.NodeRolloutInterface
	ca, tok string // the agents' CA and token files
}

func startE2E(t *testing.T) *e2e {
	e := startE2ECluster(t)
	e.startLeader(t, "judge-e2e")
	return e
}

// startE2ECluster is the cluster, the agents and Istio 1.28.1 to roll out
// to, with no orchestrator yet.
func startE2ECluster(t testing.TB) *e2e {
	if testing.Short() {
		t.Skip("starts a simulated cluster")
	}
	c := cluster.Start(t, cluster.Options{Nodes: e2eNodes, Zones: 2, ReadyDelay: 300 * time.Millisecond})
	ctx := context.Background()
	cluster.InstallCRDs(t, c, testkit.CRD(testkit.NodeRolloutsCRD))
	if err := cluster.InstallIstio(ctx, c.Client, cluster.IstioOptions{Version: "1.27.3", UpdateStrategy: appsv1.OnDeleteDaemonSetStrategyType}); err != nil {
		t.Fatal(err)
	}
	waitDaemonSets(t, c)
	f := newFleet(t)
	f.watchSwaps(t, c)

	dir := t.TempDir()
	ca, tok := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "token")
	_ = os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw}), 0o600)
	_ = os.WriteFile(tok, []byte(agentToken), 0o600)
	nwc, err := v1alpha1.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.InstallIstio(ctx, c.Client, cluster.IstioOptions{Version: "1.28.1", UpdateStrategy: appsv1.OnDeleteDaemonSetStrategyType, SkipSamples: true}); err != nil {
		t.Fatal(err)
	}
	return &e2e{c: c, f: f, rolls: nwc.NodeRollouts(), ca: ca, tok: tok}
}

// startLeader runs an orchestrator replica with a judge gate of its own (its
// own agent client, Recorder and judge, as a separate process has) until
// the returned stop is called or the test ends. Stopping it cancels its
// context: it gives up the Lease, and whatever its Recorder held is gone.
func (e *e2e) startLeader(t testing.TB, identity string) (stop func()) {
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Named(identity)
	agents, err := remote.NewAgent(remote.AgentConfig{CAFile: e.ca, TokenFile: e.tok, Timeout: time.Second, RetryMax: 1,
		RetryWaitMin: 50 * time.Millisecond, RetryWaitMax: 100 * time.Millisecond, Logger: log,
		URLFor: func(_ context.Context, node string) (string, error) { return e.f.srv.URL + "/nodes/" + node, nil }})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := record.NewRecorder(record.RecorderConfig{Source: agents, Every: 250 * time.Millisecond, Keep: 30 * time.Minute, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	go func() { _ = rec.Run(runCtx) }()
	judge, err := health.NewJudge(health.JudgeConfig{Source: rec, Logger: log}) // on the recorder's clock, as judgegate.Build wires it
	if err != nil {
		t.Fatal(err)
	}
	g, err := judgegate.New(judgegate.Config{Judge: judge, Recorder: rec, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	o, err := orchestrator.New(orchestrator.Config{
		RESTConfig: e.c.Config, Namespace: "default", Identity: identity,
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond,
		Resync: 500 * time.Millisecond, Registry: prometheus.NewRegistry(), Logger: log, Gate: g,
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = o.Run(runCtx) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

func (e *e2e) rollout(t *testing.T) *v1alpha1.NodeRollout {
	nr := judgedRollout("judged", e2eSoak)
	if _, err := e.rolls.Create(context.Background(), nr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return e.finished(t, nr.Name)
}

// judgedRollout is the judge e2e tests' rollout: one node at a time, the
// e2e baseline, this soak, the judge every second.
func judgedRollout(name string, soak time.Duration) *v1alpha1.NodeRollout {
	nr := &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: name}}
	nr.Spec.MaxParallel, nr.Spec.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
	nr.Spec.SwapTimeout = &v1alpha1.Duration{Duration: time.Minute}
	nr.Spec.Baseline = &v1alpha1.Duration{Duration: e2eBaseline}
	nr.Spec.Soak = &v1alpha1.Duration{Duration: soak}
	nr.Spec.Gates = v1alpha1.GatesSpec{Interval: &v1alpha1.Duration{Duration: time.Second}}
	return nr
}

// finished waits until the rollout is Completed or Halted and returns it.
func (e *e2e) finished(t testing.TB, name string) *v1alpha1.NodeRollout {
	t.Helper()
	var last *v1alpha1.NodeRollout
	err := wait.PollUntilContextTimeout(context.Background(), 300*time.Millisecond, 6*time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := e.rolls.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = got
		return got.Status.Phase == v1alpha1.PhaseCompleted || got.Status.Phase == v1alpha1.PhaseHalted, nil
	})
	if err != nil {
		t.Fatalf("rollout did not finish: %v; last status %+v", err, last.Status)
	}
	return last
}

func TestE2EHealthyRolloutPassesEveryGate(t *testing.T) {
	e := startE2E(t)
	nr := e.rollout(t)
	if nr.Status.Phase != v1alpha1.PhaseCompleted || nr.Status.Counts.Done != e2eNodes {
		t.Fatalf("phase %s, counts %+v, halt %q", nr.Status.Phase, nr.Status.Counts, nr.Status.HaltReason)
	}
	if len(nr.Status.Nodes) != e2eNodes {
		t.Fatalf("%d nodes in status, want %d", len(nr.Status.Nodes), e2eNodes)
	}
	for _, ns := range nr.Status.Nodes {
		j := ns.Judgement
		if !strings.HasPrefix(ns.Verdict, "Pass") || j == nil || j.IntervalOutcome != health.Pass || j.PodsCompared != 11 || j.Tests == 0 || len(j.Rows) == 0 {
			t.Errorf("node %s: verdict %q, judgement in status %+v", ns.Name, ns.Verdict, j)
		}
	}
	out := explain(t, e, nr.Name, nr.Status.Nodes[0].Name)
	for _, want := range []string{"state Done", "verdict: Pass", "11 pods compared", "POD", "BEFORE", "AFTER", "shop/"} {
		if !strings.Contains(out, want) {
			t.Errorf("nodewise explain lacks %q:\n%s", want, out)
		}
	}
}

// explain runs `nodewise explain` against the cluster, as a user would.
func explain(t *testing.T, e *e2e, rollout, node string) string {
	t.Helper()
	bin := testkit.Binary(t, "nodewise")
	var stdout, stderr strings.Builder
	cmd := exec.Command(bin, "explain", rollout, "--node", node, "--kubeconfig", e.c.Kubeconfig)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("nodewise explain %s --node %s: %v: %s", rollout, node, err, stderr.String())
	}
	t.Logf("nodewise explain %s --node %s:\n%s", rollout, node, stdout.String())
	return stdout.String()
}

func TestE2ERegressionHaltsAtThatNode(t *testing.T) {
	e := startE2E(t)
	bad := e.c.Nodes[2].Name
	e.f.mu.Lock()
	e.f.regress[bad] = true
	e.f.mu.Unlock()
	nr := e.rollout(t)
	assertHaltedAt(t, e, nr, bad, "pod shop/"+bad+"-app-3: resets received")
	var j *v1alpha1.NodeJudgement
	for _, ns := range nr.Status.Nodes {
		if ns.Name == bad {
			j = ns.Judgement
		}
	}
	if j == nil || j.IntervalOutcome != health.Fail || j.ConsecutiveFailures != 2 || j.Judgements != 2 || j.Regressions == 0 {
		t.Errorf("judgement in status %+v, want the node failed after 2 consecutive judgements (one interval after the first)", j)
	}
	out := explain(t, e, nr.Name, bad)
	for _, want := range []string{"state Failed", "2 failing in a row", "shop/" + bad + "-app-3", "resets received", "REGRESSED"} {
		if !strings.Contains(out, want) {
			t.Errorf("nodewise explain lacks %q:\n%s", want, out)
		}
	}
}

func TestE2EAgentThatStopsAnsweringHalts(t *testing.T) {
	e := startE2E(t)
	bad := e.c.Nodes[4].Name
	e.f.mu.Lock()
	e.f.mute[bad] = true
	e.f.mu.Unlock()
	nr := e.rollout(t)
	assertHaltedAt(t, e, nr, bad, "agent on node "+bad+" did not answer")
}

// assertHaltedAt: the rollout halted, at node bad, with the reason in its
// status entry, and no node after it was swapped.
func assertHaltedAt(t *testing.T, e *e2e, nr *v1alpha1.NodeRollout, bad, reason string) {
	t.Helper()
	if nr.Status.Phase != v1alpha1.PhaseHalted {
		t.Fatalf("phase %s, want Halted; counts %+v", nr.Status.Phase, nr.Status.Counts)
	}
	var entry *v1alpha1.NodeStatus
	for i := range nr.Status.Nodes {
		if nr.Status.Nodes[i].Name == bad {
			entry = &nr.Status.Nodes[i]
		}
	}
	if entry == nil || !strings.Contains(entry.Verdict, reason) || !strings.Contains(nr.Status.HaltReason, reason) {
		t.Fatalf("node %s status %+v, halt reason %q: want %q in both", bad, entry, nr.Status.HaltReason, reason)
	}
	t.Logf("halt reason: %s", nr.Status.HaltReason)
	e.f.mu.Lock()
	defer e.f.mu.Unlock()
	if len(e.f.swapped) > int(nr.Status.Counts.Done)+1 {
		t.Errorf("%d nodes swapped, but only %d done before the halt at %s: the rollout went on", len(e.f.swapped), nr.Status.Counts.Done, bad)
	}
}

func waitDaemonSets(t testing.TB, c *cluster.Cluster) {
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, name := range []string{cluster.CNIName, cluster.ZtunnelName} {
			ds, err := c.Client.AppsV1().DaemonSets(cluster.IstioNamespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil || ds.Status.NumberReady != e2eNodes {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("DaemonSets not ready: %v", err)
	}
}

// TestE2EAPIServerRejectsBadGates: the real kube-apiserver, with the generated
// CRD, rejects the gates that gatespec rejects, naming the field.
func TestE2EAPIServerRejectsBadGates(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a simulated cluster")
	}
	c := cluster.Start(t, cluster.Options{Nodes: 1})
	cluster.InstallCRDs(t, c, testkit.CRD(testkit.NodeRolloutsCRD))
	nwc, err := v1alpha1.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	rolls := nwc.NodeRollouts()
	d := func(x time.Duration) *v1alpha1.Duration { return &v1alpha1.Duration{Duration: x} }
	for i, tc := range []struct {
		gates v1alpha1.GatesSpec
		want  string
	}{
		{v1alpha1.GatesSpec{Interval: d(0)}, "gates.interval must be a positive duration"},
		{v1alpha1.GatesSpec{Interval: d(-time.Minute)}, "spec.gates.interval: Invalid value: \"-1m0s\": must be a duration such as 30s, 5m or 1h30m (units ns, us, ms, s, m, h; no spaces, no sign)"},
		{v1alpha1.GatesSpec{MaxSnapshotAge: d(0)}, "gates.maxSnapshotAge must be a positive duration"},
		{v1alpha1.GatesSpec{Latency: []v1alpha1.LatencyGate{{Metric: v1alpha1.MetricSRTT, MinIncrease: d(-time.Millisecond)}}}, "spec.gates.latency[0].minIncrease: Invalid value: \"-1ms\": must be a duration"},
		{v1alpha1.GatesSpec{Counts: []v1alpha1.CountGate{{Metric: v1alpha1.MetricResetsSent, MinRatio: "0.5"}}}, "minRatio must be a decimal of at least 1"},
		{v1alpha1.GatesSpec{Counts: []v1alpha1.CountGate{{Metric: "resets"}}}, `Unsupported value: "resets"`},
		{v1alpha1.GatesSpec{Latency: []v1alpha1.LatencyGate{{Metric: "p99"}}}, `Unsupported value: "p99"`},
		{v1alpha1.GatesSpec{Significance: "0.9"}, "gates.significance must be a decimal in (0, 0.5]"},
		{v1alpha1.GatesSpec{Prometheus: &v1alpha1.PrometheusGates{Address: "http://prometheus.monitoring.svc:9090", NoData: "Ignore",
			Queries: []v1alpha1.PrometheusQuery{{Name: "q", Query: "up", FailWhen: v1alpha1.FailBelow, Threshold: "1"}}}},
			`spec.gates.prometheus.noData: Unsupported value: "Ignore": supported values: "Inconclusive", "Pass", "Fail"`},
		{v1alpha1.GatesSpec{Prometheus: &v1alpha1.PrometheusGates{Address: "http://prometheus.monitoring.svc:9090",
			Queries: []v1alpha1.PrometheusQuery{{Name: "q", Query: "up", FailWhen: v1alpha1.FailBelow, Threshold: "1", NoData: "pass"}}}},
			`spec.gates.prometheus.queries[0].noData: Unsupported value: "pass"`},
	} {
		nr := &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bad-%d", i)}}
		nr.Spec.Gates = tc.gates
		_, err := rolls.Create(context.Background(), nr, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("gates %+v: %v, want Invalid with %q", tc.gates, err, tc.want)
		}
	}
	nr := &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: "good"}}
	nr.Spec.Gates = v1alpha1.GatesSpec{Interval: d(time.Minute), Significance: "0.01",
		Counts:  []v1alpha1.CountGate{{Metric: v1alpha1.MetricRetransmits, MinRatio: "3", MinExcessPerSecond: "0.5"}},
		Latency: []v1alpha1.LatencyGate{{Metric: v1alpha1.MetricConnectLatency, MinRatio: "1.5", MinIncrease: d(time.Millisecond)}},
		Prometheus: &v1alpha1.PrometheusGates{Address: "http://prometheus.monitoring.svc:9090", NoData: v1alpha1.NoDataFail,
			Queries: []v1alpha1.PrometheusQuery{{Name: "q", Query: "up", FailWhen: v1alpha1.FailBelow, Threshold: "1", NoData: v1alpha1.NoDataInconclusive}}}}
	if _, err := rolls.Create(context.Background(), nr, metav1.CreateOptions{}); err != nil {
		t.Errorf("valid gates rejected: %v", err)
	}
}
