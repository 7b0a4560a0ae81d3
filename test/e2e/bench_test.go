package e2e

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/retry"

	"github.com/nodewise/nodewise/orchestrator/apis/v1alpha1"
	"github.com/nodewise/nodewise/test/cluster"
)

// swapClock records, per node, when the first old data-plane pod was deleted
// and when the last new pod became Ready: the node's swap as the cluster saw it.
type swapClock struct {
	start, end map[string]time.Time
	stop       func()
}

func (e *env) clockSwaps(newVersion string) *swapClock {
	sc := &swapClock{start: map[string]time.Time{}, end: map[string]time.Time{}}
	ctx, cancel := context.WithCancel(context.Background())
	pl, err := e.c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	w, err := e.c.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: pl.ResourceVersion})
	if err != nil {
		e.t.Fatal(err)
	}
	done := make(chan struct{})
	readyNew := map[string]int{}
	seen := map[string]bool{}
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || dsOf(p) == "" || ev.Type == watch.Deleted {
				continue
			}
			now := time.Now()
			node := p.Spec.NodeName
			isNew := strings.HasSuffix(p.Spec.Containers[0].Image, ":"+newVersion)
			if !isNew && p.DeletionTimestamp != nil {
				if _, ok := sc.start[node]; !ok {
					sc.start[node] = now
				}
			}
			if isNew && podReady(p) && !seen[string(p.UID)] {
				seen[string(p.UID)] = true
				readyNew[node]++
				if readyNew[node] == 2 {
					sc.end[node] = now
				}
			}
		}
	}()
	sc.stop = func() { cancel(); <-done }
	return sc
}

func (sc *swapClock) took(node string) time.Duration { return sc.end[node].Sub(sc.start[node]) }

// BenchmarkNodeRollout200 rolls 200 simulated nodes with zero soak and
// prints the wall time, the floor (sum over waves of the slowest swap), API
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
		s.MaxParallel, s.MaxUnavailable = parallel, parallel
		s.SwapTimeout = &metav1.Duration{Duration: 2 * time.Minute}
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

	waves := map[int32][]string{}
	for _, n := range nr.Status.Nodes {
		waves[n.Wave] = append(waves[n.Wave], n.Name)
	}
	var floor time.Duration
	for _, ns := range waves {
		var slowest time.Duration
		for _, n := range ns {
			slowest = max(slowest, sc.took(n))
		}
		floor += slowest
	}
	verbs := map[string]float64{}
	for _, m := range fams["nodewise_api_requests_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "verb" {
				verbs[l.GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
	var vs []string
	for v, n := range verbs {
		vs = append(vs, fmt.Sprintf("%s=%.2f", v, n/nodes))
	}
	sort.Strings(vs)

	// Native DaemonSet RollingUpdate, same parallelism, same cluster.
	native := e.nativeRollingUpdate("1.28.2", parallel, nodes)
	fmt.Printf("nodewise 200 nodes, %d waves (maxParallel %d), zero soak: wall %s, floor %s (wall/floor %.2f)\n",
		len(waves), parallel, wall.Round(10*time.Millisecond), floor.Round(10*time.Millisecond), wall.Seconds()/floor.Seconds())
	fmt.Printf("API requests per node by verb: %s\n", strings.Join(vs, " "))
	fmt.Printf("orchestrator peak RSS: %.1f MiB\n", float64(rss)/1024)
	fmt.Printf("native DaemonSet RollingUpdate (maxUnavailable %d, both DaemonSets at once): wall %s; nodewise/native = %.2f\n",
		parallel, native.Round(10*time.Millisecond), wall.Seconds()/native.Seconds())
	b.ReportMetric(wall.Seconds(), "wall-s")
	b.ReportMetric(floor.Seconds(), "floor-s")
	b.ReportMetric(native.Seconds(), "native-s")
	b.ReportMetric(float64(rss)/1024, "peakRSS-MiB")
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
