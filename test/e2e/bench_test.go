package e2e

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/kubectl/pkg/util/podutils"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/client-go/util/retry"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/planner"
	"github.com/nodewise/nodewise/sim/cluster"
)

// swapClock records, per node, when the first old data-plane pod was deleted
// and when the last new pod became Ready: the node's swap as the cluster saw
// it; and when the node was cordoned and uncordoned: its time out, which
// holds its slot (the record written with the cordon, Done with the uncordon).
type swapClock struct {
	mu                   sync.Mutex
	start, end           map[string]time.Time
	cordoned, uncordoned map[string]time.Time
	stop                 func()
}

func (e *env) clockSwaps(newVersion string) *swapClock {
	return clockSwaps(e.t, e.c.Client, newVersion)
}

// clockSwaps starts a swapClock on the data-plane pods of the cluster.
func clockSwaps(t testing.TB, client kubernetes.Interface, newVersion string) *swapClock {
	sc := &swapClock{start: map[string]time.Time{}, end: map[string]time.Time{}, cordoned: map[string]time.Time{}, uncordoned: map[string]time.Time{}}
	ctx, cancel := context.WithCancel(context.Background())
	pl, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nl, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	// Watches that outlive the API server's request timeout (a 5,000-node
	// rollout does) are resumed from their last event, not ended.
	retry := func(rv string, w cache.WatchFuncWithContext) watch.Interface {
		rw, err := watchtools.NewRetryWatcherWithContext(ctx, rv, &cache.ListWatch{WatchFuncWithContext: w})
		if err != nil {
			t.Fatal(err)
		}
		return rw
	}
	w := retry(pl.ResourceVersion, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		return client.CoreV1().Pods(ns).Watch(ctx, o)
	})
	nw := retry(nl.ResourceVersion, func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		return client.CoreV1().Nodes().Watch(ctx, o)
	})
	done := make(chan struct{}, 2)
	go func() {
		defer func() { done <- struct{}{} }()
		for ev := range nw.ResultChan() {
			n, ok := ev.Object.(*corev1.Node)
			if !ok {
				continue
			}
			now := time.Now()
			sc.mu.Lock()
			if _, was := sc.cordoned[n.Name]; n.Spec.Unschedulable && !was {
				sc.cordoned[n.Name] = now
			} else if _, out := sc.uncordoned[n.Name]; was && !n.Spec.Unschedulable && !out {
				sc.uncordoned[n.Name] = now
			}
			sc.mu.Unlock()
		}
	}()
	readyNew := map[string]int{}
	seen := map[string]bool{}
	go func() {
		defer func() { done <- struct{}{} }()
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || dsOf(p) == "" || ev.Type == watch.Deleted {
				continue
			}
			now := time.Now()
			node := p.Spec.NodeName
			isNew := strings.HasSuffix(p.Spec.Containers[0].Image, ":"+newVersion)
			sc.mu.Lock()
			if !isNew && p.DeletionTimestamp != nil {
				if _, ok := sc.start[node]; !ok {
					sc.start[node] = now
				}
			}
			if isNew && podutils.IsPodReady(p) && !seen[string(p.UID)] {
				seen[string(p.UID)] = true
				readyNew[node]++
				if readyNew[node] == 2 {
					sc.end[node] = now
				}
			}
			sc.mu.Unlock()
		}
	}()
	sc.stop = func() { cancel(); <-done; <-done }
	return sc
}

func (sc *swapClock) took(node string) time.Duration { return sc.end[node].Sub(sc.start[node]) }

// out is how long node was cordoned (0 if the clock did not see both).
func (sc *swapClock) out(node string) time.Duration {
	c, u := sc.cordoned[node], sc.uncordoned[node]
	if c.IsZero() || u.IsZero() {
		return 0
	}
	return u.Sub(c)
}

// clocked is how many nodes the clock saw both ends of a swap on.
func (sc *swapClock) clocked() int {
	n := 0
	for node, end := range sc.end {
		if start, ok := sc.start[node]; ok && end.After(start) {
			n++
		}
	}
	return n
}

// BenchmarkNodeRollout200 rolls 200 simulated nodes with zero soak and
// prints the wall time, the floor (see swapFloors), API
// requests per node by verb and the orchestrator's peak RSS; then it runs the
// native DaemonSet RollingUpdate at the same parallelism on the same cluster.
func BenchmarkNodeRollout200(b *testing.B) {
	const nodes, parallel = 200, 20
	e := newEnv(b, nodes, 3)
	addr := freeAddr(b)
	p := e.startProcess("bench", addr)
	waitHolder(b, e, "bench")
	e.upgrade("1.28.1")
	sc := e.clockSwaps("1.28.1")
	start := time.Now()
	e.apply(rollout("bench", func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(parallel), intstr.FromInt32(parallel)
		s.SwapTimeout = &v1alpha1.Duration{Duration: 2 * time.Minute}
	}))
	nr := e.waitPhase("bench", 20*time.Minute, v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted)
	wall := time.Since(start)
	time.Sleep(200 * time.Millisecond)
	sc.stop()
	if nr.Status.Phase != v1alpha1.PhaseCompleted {
		b.Fatalf("phase %s: %s", nr.Status.Phase, nr.Status.HaltReason)
	}
	fams := scrape(b, addr)
	rss := peakRSS(p.cmd.Process.Pid)
	p.kill()
	if dst := os.Getenv("NODEWISE_BENCH_LOG"); dst != "" { // keep the orchestrator's log (per-node step times)
		if data, err := os.ReadFile(p.log); err == nil {
			_ = os.WriteFile(dst, data, 0o644)
		}
	}

	floor, barrierFloor, waves := swapFloors(nr, parallel, sc)
	verbs := requestsByVerb(fams)
	var vs []string
	for v, n := range verbs {
		vs = append(vs, fmt.Sprintf("%s=%.2f", v, n/nodes))
	}
	sort.Strings(vs)

	// Native DaemonSet RollingUpdate, same parallelism, same cluster.
	native := e.nativeRollingUpdate("1.28.2", parallel, nodes)
	fmt.Printf("nodewise 200 nodes, %d waves (maxParallel %d), zero soak: wall %s, floor %s (wall/floor %.2f); wave-barrier floor %s (wall/that %.2f)\n",
		waves, parallel, wall.Round(10*time.Millisecond), floor.Round(10*time.Millisecond), wall.Seconds()/floor.Seconds(),
		barrierFloor.Round(10*time.Millisecond), wall.Seconds()/barrierFloor.Seconds())
	fmt.Printf("API requests per node by verb: %s\n", strings.Join(vs, " "))
	fmt.Printf("mean time per node in each step (until the next one is persisted): %s\n", stepMeans(fams))
	fmt.Printf("orchestrator peak RSS: %.1f MiB\n", float64(rss)/1024)
	fmt.Printf("native DaemonSet RollingUpdate (maxUnavailable %d, both DaemonSets at once): wall %s; nodewise/native = %.2f\n",
		parallel, native.Round(10*time.Millisecond), wall.Seconds()/native.Seconds())
	b.ReportMetric(wall.Seconds(), "wall-s")
	b.ReportMetric(floor.Seconds(), "floor-s")
	b.ReportMetric(native.Seconds(), "native-s")
	b.ReportMetric(float64(rss)/1024, "peakRSS-MiB")
}

// swapFloors computes, from each node's swap as the cluster saw it (first old
// pod deleted → last new pod Ready):
//
//   - floor: the wall time of the same plan run by an orchestrator whose
//     bookkeeping costs nothing. The plan is rebuilt with planner.Order
//     from the status (names, zones, canaries). Windows run one after the
//     other (canaries, ramp waves and zone boundaries are barriers); within a
//     window nodes start in plan order, each on the first slot to free
//     (min(maxParallel, maxUnavailable) slots), and hold it for exactly their
//     swap. For a window that is one wave this is the wave's slowest swap,
//     the "sum over waves of the slowest swap"; for a sliding window
//     it is what a sliding window with free bookkeeping would take, which a
//     sum over its waves' slowest swaps overstates.
//   - barrierFloor: the formula taken literally, the sum over waves
//     of each wave's slowest swap (what waves as barriers would take).
func swapFloors(nr *v1alpha1.NodeRollout, slots int, sc *swapClock) (floor, barrierFloor time.Duration, waves int) {
	var views []model.NodeView
	for _, n := range nr.Status.Nodes {
		views = append(views, model.NodeView{Name: n.Name, Zone: n.Zone})
	}
	plan, _ := planner.Order(views, nr.Spec.CanaryNodes, nr.Spec.MaxParallel.IntValue())
	slots = min(slots, nr.Spec.MaxUnavailable.IntValue())
	slowest := map[int]time.Duration{}
	windows := map[int][]time.Duration{}
	var order []int
	for _, pn := range plan {
		d := sc.took(pn.Name)
		slowest[pn.Wave] = max(slowest[pn.Wave], d)
		if _, ok := windows[pn.Window]; !ok {
			order = append(order, pn.Window)
		}
		windows[pn.Window] = append(windows[pn.Window], d)
	}
	for _, d := range slowest {
		barrierFloor += d
	}
	for _, w := range order {
		free := make([]time.Duration, slots) // when each slot frees, from the window's start
		var end time.Duration
		for _, d := range windows[w] {
			i := 0
			for j := range free {
				if free[j] < free[i] {
					i = j
				}
			}
			free[i] += d
			end = max(end, free[i])
		}
		floor += end
	}
	return floor, barrierFloor, len(slowest)
}

// stepMeans is the mean of nodewise_rollout_step_duration_seconds by step.
func stepMeans(fams map[string]*dto) string {
	var out []string
	for _, m := range fams["nodewise_rollout_step_duration_seconds"].GetMetric() {
		h := m.GetHistogram()
		if h.GetSampleCount() == 0 {
			continue
		}
		for _, l := range m.GetLabel() {
			if l.GetName() == "step" {
				out = append(out, fmt.Sprintf("%s=%.0fms", l.GetValue(), 1000*h.GetSampleSum()/float64(h.GetSampleCount())))
			}
		}
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// nativeRollingUpdate switches both DaemonSets to RollingUpdate (maxUnavailable
// = parallel, no surge) with a new version and waits until both are rolled.
func (e *env) nativeRollingUpdate(version string, parallel, nodes int) time.Duration {
	ctx := context.Background()
	mu := intstr.FromInt32(int32(parallel))
	zero := intstr.FromInt32(0)
	start := time.Now()
	for _, name := range []string{cluster.CNIName, cluster.ZtunnelName} {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			ds, err := e.c.Client.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &mu, MaxSurge: &zero}}
			for i := range ds.Spec.Template.Spec.Containers {
				img := ds.Spec.Template.Spec.Containers[i].Image
				ds.Spec.Template.Spec.Containers[i].Image = img[:strings.LastIndex(img, ":")] + ":" + version
			}
			_, err = e.c.Client.AppsV1().DaemonSets(ns).Update(ctx, ds, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			e.t.Fatal(err)
		}
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, name := range []string{cluster.CNIName, cluster.ZtunnelName} {
			ds, err := e.c.Client.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			s := ds.Status
			if s.ObservedGeneration != ds.Generation || s.UpdatedNumberScheduled != int32(nodes) || s.NumberAvailable != int32(nodes) || s.NumberReady != int32(nodes) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		e.t.Fatalf("native rolling update did not finish: %v", err)
	}
	return time.Since(start)
}

// peakRSS is VmHWM of a process, in KiB.
func peakRSS(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return -1
}
