package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/kubectl/pkg/util/podutils"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/testkit"
)

const ns = cluster.IstioNamespace

// Every test here starts a cluster of its own (own ports, own state
// directory, own processes, killed by PID) and spends most of its time waiting
// on it: rollouts paced by soaks, polls, the simulated kubelet's ready delay.
// So a test calls t.Parallel() first and runs beside the others; go test's
// -parallel (GOMAXPROCS unless set) bounds how many clusters run at once.
// A test stays serial (no t.Parallel, so it runs first, before the parallel
// ones start) when it asserts a timing that load could break: a lease handover
// (leader, fence, churn, handover), a TTL (kuredlock), an event placed inside
// a soak or window (soakflap, window), a halt within the swap timeout (halt),
// an agent answering within its client's 1 s (drainauto), an abort landing
// while a bridge starts (TestSurgeAbortMidSwap), and the judge's 3 s windows
// sampled every second (the judgegate rollouts).

// env is a simulated cluster with the CRDs and Istio 1.27.3 (OnDelete) installed.
type env struct {
	t        testing.TB
	c        *cluster.Cluster
	rollouts v1alpha1.NodeRolloutInterface
}

func newEnv(t testing.TB, nodes, zones int) *env {
	t.Helper()
	return newEnvWith(t, cluster.Options{Nodes: nodes, Zones: zones})
}

// newEnvWith is newEnv on a cluster started with opts (ReadyDelay 300 ms
// unless set).
func newEnvWith(t testing.TB, opts cluster.Options) *env {
	t.Helper()
	nodes := opts.Nodes
	if opts.ReadyDelay == 0 {
		opts.ReadyDelay = 300 * time.Millisecond
	}
	c := cluster.Start(t, opts)
	ctx := context.Background()
	cluster.InstallCRDs(t, c, testkit.CRD(testkit.NodeRolloutsCRD))
	if err := cluster.InstallIstio(ctx, c.Client, cluster.IstioOptions{Version: "1.27.3", UpdateStrategy: appsv1.OnDeleteDaemonSetStrategyType}); err != nil {
		t.Fatal(err)
	}
	nwc, err := v1alpha1.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	rc := nwc.NodeRollouts()
	e := &env{t: t, c: c, rollouts: rc}
	e.waitDaemonSetsReady(nodes)
	return e
}

func (e *env) waitDaemonSetsReady(nodes int) {
	e.t.Helper()
	ctx := context.Background()
	ready := map[string]int32{}
	// A fleet-scale cluster starts its 2 pods per node at the controllers' QPS.
	timeout := 3*time.Minute + time.Duration(nodes)*300*time.Millisecond
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		for _, name := range []string{cluster.CNIName, cluster.ZtunnelName} {
			ds, err := e.c.Client.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			if ready[name] = ds.Status.NumberReady; ds.Status.NumberReady != int32(nodes) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		e.t.Fatalf("DaemonSets not ready on %d nodes within %s (Ready: %v): %v", nodes, timeout, ready, err)
	}
}

// upgrade moves the DaemonSet templates (OnDelete: no pod changes by itself).
func (e *env) upgrade(version string) {
	e.t.Helper()
	if err := cluster.InstallIstio(context.Background(), e.c.Client, cluster.IstioOptions{Version: version, UpdateStrategy: appsv1.OnDeleteDaemonSetStrategyType, SkipSamples: true}); err != nil {
		e.t.Fatal(err)
	}
}

// newestHash is the newest ControllerRevision hash of a DaemonSet, by owner UID.
func (e *env) newestHash(name string) string {
	e.t.Helper()
	ctx := context.Background()
	var hash string
	_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		ds, err := e.c.Client.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		revs, err := e.c.Client.AppsV1().ControllerRevisions(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		var best int64 = -1
		for _, r := range revs.Items {
			for _, o := range r.OwnerReferences {
				if o.UID == ds.UID && r.Revision > best {
					best, hash = r.Revision, r.Labels["controller-revision-hash"]
				}
			}
		}
		return ds.Status.ObservedGeneration == ds.Generation && hash != "", nil
	})
	return hash
}

func (e *env) apply(nr *v1alpha1.NodeRollout) {
	e.t.Helper()
	if _, err := e.rollouts.Create(context.Background(), nr, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("creating NodeRollout: %v", err)
	}
}

func (e *env) waitPhase(name string, timeout time.Duration, phases ...v1alpha1.RolloutPhase) *v1alpha1.NodeRollout {
	e.t.Helper()
	var last *v1alpha1.NodeRollout
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		nr, err := e.rollouts.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = nr
		for _, p := range phases {
			if nr.Status.Phase == p {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		e.t.Fatalf("NodeRollout %s not in %v: last phase %q reason %q counts %+v", name, phases, last.Status.Phase, last.Status.HaltReason, last.Status.Counts)
	}
	return last
}

// runInProcess runs an orchestrator in this process until the test ends.
func (e *env) runInProcess(identity string) (cancel func(), reg *prometheus.Registry) {
	e.t.Helper()
	return e.runInProcessWith(identity, nil)
}

// runInProcessWith is runInProcess with the config changed by mut (when set).
func (e *env) runInProcessWith(identity string, mut func(*orchestrator.Config)) (cancel func(), reg *prometheus.Registry) {
	e.t.Helper()
	reg = prometheus.NewRegistry()
	cfg := orchestrator.Config{
		RESTConfig: e.c.Config, Namespace: "default", Identity: identity,
		LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond,
		Resync: 500 * time.Millisecond, Registry: reg,
		Logger: zaptest.NewLogger(e.t, zaptest.Level(zap.WarnLevel)),
	}
	if mut != nil {
		mut(&cfg)
	}
	o, err := orchestrator.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancelFn := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = o.Run(ctx) }()
	var once sync.Once
	stop := func() { once.Do(func() { cancelFn(); <-done }) }
	e.t.Cleanup(stop)
	return stop, reg
}

// proc is an orchestrator subprocess.
type proc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

func (e *env) startProcess(identity, metricsAddr string, extra ...string) *proc {
	e.t.Helper()
	bin := testkit.Binary(e.t, "orchestrator")
	logPath := filepath.Join(e.t.TempDir(), identity+".log")
	f, err := os.Create(logPath)
	if err != nil {
		e.t.Fatal(err)
	}
	args := append([]string{"--kubeconfig", e.c.Kubeconfig, "--namespace", "default", "--identity", identity,
		"--lease-duration", "4s", "--renew-deadline", "3s", "--retry-period", "500ms", "--resync", "500ms",
		"--metrics-addr", metricsAddr}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	p := &proc{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	e.t.Cleanup(func() {
		p.kill()
		if e.t.Failed() {
			data, _ := os.ReadFile(logPath)
			lines := strings.Split(string(data), "\n")
			if len(lines) > 40 {
				lines = lines[len(lines)-40:]
			}
			e.t.Logf("--- %s log tail:\n%s", identity, strings.Join(lines, "\n"))
		}
	})
	return p
}

// kill sends SIGKILL to the process by its PID and waits for it to exit.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

func rollout(name string, mut func(*v1alpha1.NodeRolloutSpec)) *v1alpha1.NodeRollout {
	nr := &v1alpha1.NodeRollout{ObjectMeta: metav1.ObjectMeta{Name: name}}
	nr.Spec.MaxParallel, nr.Spec.MaxUnavailable = intstr.FromInt32(4), intstr.FromInt32(4)
	nr.Spec.SwapTimeout = &v1alpha1.Duration{Duration: 60 * time.Second}
	// No baseline and no soak unless a test asks: these tests are about the
	// node steps, and the defaults (minutes) are the judge's.
	nr.Spec.Baseline, nr.Spec.Soak = &v1alpha1.Duration{}, &v1alpha1.Duration{}
	if mut != nil {
		mut(&nr.Spec)
	}
	return nr
}

// watcher records every Node and data-plane Pod event, independently of the
// orchestrator, and tracks how many nodes were unavailable at once: cordoned
// (other than the nodes cordoned before the rollout) or without a Ready pod
// of each DaemonSet.
type watcher struct {
	mu          sync.Mutex
	preCordoned map[string]bool
	cordoned    map[string]bool
	pods        map[string]*corev1.Pod // uid → pod
	maxUnavail  int
	worst       string
	firstSwap   map[string]time.Time // node → first time a data-plane pod on it was deleted
	deletes     map[string]int       // node/ds → old pods deleted
	lastDelete  map[string]time.Time // node/ds → when the last of them was deleted
	stop        func()
}

func (e *env) watch(preCordoned ...string) *watcher {
	e.t.Helper()
	w := &watcher{preCordoned: map[string]bool{}, cordoned: map[string]bool{}, pods: map[string]*corev1.Pod{}, firstSwap: map[string]time.Time{}, deletes: map[string]int{}, lastDelete: map[string]time.Time{}}
	for _, n := range preCordoned {
		w.preCordoned[n] = true
	}
	ctx, cancel := context.WithCancel(context.Background())
	nl, err := e.c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, n := range nl.Items {
		w.cordoned[n.Name] = n.Spec.Unschedulable
	}
	pl, err := e.c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	for i := range pl.Items {
		w.pods[string(pl.Items[i].UID)] = &pl.Items[i]
	}
	w.check("initial")
	if w.maxUnavail != 0 {
		e.t.Fatalf("nodes unavailable before the rollout: %s", w.worst)
	}
	nw, err := e.c.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{ResourceVersion: nl.ResourceVersion})
	if err != nil {
		e.t.Fatal(err)
	}
	pw, err := e.c.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: pl.ResourceVersion})
	if err != nil {
		e.t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for ev := range nw.ResultChan() {
			if n, ok := ev.Object.(*corev1.Node); ok {
				w.mu.Lock()
				w.cordoned[n.Name] = n.Spec.Unschedulable
				w.check("node " + n.Name)
				w.mu.Unlock()
			}
		}
	}()
	go func() {
		defer wg.Done()
		for ev := range pw.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			w.mu.Lock()
			if ev.Type == watch.Deleted {
				delete(w.pods, string(p.UID))
			} else {
				if p.DeletionTimestamp != nil {
					if old := w.pods[string(p.UID)]; old != nil && old.DeletionTimestamp == nil && dsOf(p) != "" {
						if _, seen := w.firstSwap[p.Spec.NodeName]; !seen {
							w.firstSwap[p.Spec.NodeName] = time.Now()
						}
						w.deletes[p.Spec.NodeName+"/"+dsOf(p)]++
						w.lastDelete[p.Spec.NodeName+"/"+dsOf(p)] = time.Now()
					}
				}
				w.pods[string(p.UID)] = p
			}
			w.check("pod " + p.Name)
			w.mu.Unlock()
		}
	}()
	w.stop = func() { cancel(); wg.Wait() }
	e.t.Cleanup(w.stop)
	return w
}

// check counts unavailable nodes; callers hold mu.
func (w *watcher) check(what string) {
	unavailable := map[string]bool{}
	for n, c := range w.cordoned {
		if c && !w.preCordoned[n] {
			unavailable[n] = true
		}
	}
	readyPods := map[string]int{}
	nodes := map[string]bool{}
	for n := range w.cordoned {
		nodes[n] = true
	}
	for _, p := range w.pods {
		if p.Spec.NodeName == "" {
			continue
		}
		if dsOf(p) != "" && p.DeletionTimestamp == nil && podutils.IsPodReady(p) {
			readyPods[p.Spec.NodeName]++
		}
	}
	if len(w.pods) > 0 {
		for n := range nodes {
			if readyPods[n] < 2 {
				unavailable[n] = true
			}
		}
	}
	if len(unavailable) > w.maxUnavail {
		var names []string
		for n := range unavailable {
			names = append(names, n)
		}
		sort.Strings(names)
		w.maxUnavail, w.worst = len(unavailable), what+": "+strings.Join(names, ",")
	}
}

func (w *watcher) max() (int, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.maxUnavail, w.worst
}

func (w *watcher) swapOrder() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var names []string
	for n := range w.firstSwap {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return w.firstSwap[names[i]].Before(w.firstSwap[names[j]]) })
	return names
}

// assertAllOnNewest checks every node runs a Ready pod of both DaemonSets on the newest revision.
func (e *env) assertAllOnNewest(nodes int) {
	e.t.Helper()
	ctx := context.Background()
	for _, name := range []string{cluster.CNIName, cluster.ZtunnelName} {
		hash := e.newestHash(name)
		pods, err := e.c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		onNew := map[string]bool{}
		for _, p := range pods.Items {
			if dsOf(&p) == name && p.DeletionTimestamp == nil && p.Labels["controller-revision-hash"] == hash && podutils.IsPodReady(&p) {
				onNew[p.Spec.NodeName] = true
			}
		}
		if len(onNew) != nodes {
			e.t.Errorf("%s: %d of %d nodes on revision %s", name, len(onNew), nodes, hash)
		}
	}
}

func (e *env) unschedulable() map[string]bool {
	e.t.Helper()
	nodes, err := e.c.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]bool{}
	for _, n := range nodes.Items {
		if n.Spec.Unschedulable {
			out[n.Name] = true
		}
	}
	return out
}

func (e *env) cordon(node string) {
	e.t.Helper()
	patch := []byte(`{"spec":{"unschedulable":true}}`)
	if _, err := e.c.Client.CoreV1().Nodes().Patch(context.Background(), node, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func zoneOf(c *cluster.Cluster, node string) string {
	for _, n := range c.Nodes {
		if n.Name == node {
			return n.Zone
		}
	}
	return ""
}

func dsOf(p *corev1.Pod) string {
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return o.Name
		}
	}
	return ""
}

func writeFile(path, body string) error { return os.WriteFile(path, []byte(body), 0o644) }
