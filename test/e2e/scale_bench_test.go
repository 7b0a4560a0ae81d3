package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
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
	"k8s.io/kubectl/pkg/util/podutils"

	dtomodel "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/write"
	"github.com/nodewise/nodewise/sim/cluster"
)

// BenchmarkNodeRolloutScale is `make bench-scale`: a simulated cluster of
// NODEWISE_BENCH_SCALE nodes (the make target sets 1,000) in 5 zones, both
// DaemonSets and NODEWISE_BENCH_APPS (10) app pods per node, rolled 1.27.3 → 1.28.1 with
// maxParallel = maxUnavailable = 50, zero soak, drain never, the default
// (surge) ztunnel swap and the readiness gate on every node. Two
// orchestrator processes run; the leader is killed with SIGKILL once a third
// of the nodes are done, and the standby carries on. Then the native
// DaemonSet RollingUpdate runs on the same cluster at the same parallelism.
// kube-controller-manager and kube-scheduler run with kube-api-qps 100 (as
// large clusters configure them; the upstream defaults of 20 and 50 would
// make the cluster's own controllers the bottleneck of both rollouts). The
// simulated kubelets renew their Leases at the fleet's default period
// (cluster.FleetHeartbeat: 50 s at 1,000 nodes, 250 s at 5,000), so that at
// rest the fleet costs the API server a constant 20 requests a second, not
// one per node every 10 s.
func BenchmarkNodeRolloutScale(b *testing.B) {
	nodes, _ := strconv.Atoi(os.Getenv("NODEWISE_BENCH_SCALE"))
	if nodes <= 0 {
		b.Skip("set NODEWISE_BENCH_SCALE=NODES to run it (make bench-scale runs 1,000)")
	}
	// NODEWISE_BENCH_APPS (make's APPS) sets the app pods per node, 10
	// unless set: on this shared 2-core machine, 50,000 app pods take the
	// cluster most of an hour to start at 5,000 nodes.
	appsPerNode, _ := strconv.Atoi(os.Getenv("NODEWISE_BENCH_APPS"))
	if appsPerNode <= 0 {
		appsPerNode = 10
	}
	const zones, parallel, qps = 5, 50, 100
	begin := time.Now()
	say := func(format string, args ...any) {
		fmt.Printf("[%6.1fs] %s\n", time.Since(begin).Seconds(), fmt.Sprintf(format, args...))
	}
	e := newEnvWith(b, cluster.Options{Nodes: nodes, Zones: zones, ControllerQPS: qps})
	say("cluster of %d nodes up (Lease renewals every %s), both DaemonSets Ready", nodes, cluster.FleetHeartbeat(nodes))
	e.fillApps(nodes*appsPerNode, say)
	say("%d app pods Running", nodes*appsPerNode)
	perNode := e.restCost(30*time.Second, nodes)
	say("at rest: %s", perNode)

	leaderAddr, standbyAddr := freeAddr(b), freeAddr(b)
	// The chart's leader-election timings (the binary's defaults), not the
	// tests' 4 s lease: the handover is the standby's, following the
	// leader's presence (docs/orchestrator.md, "A leader whose process is gone").
	chartLease := []string{"--lease-duration", "15s", "--renew-deadline", "10s", "--retry-period", "2s"}
	leader := e.startProcess("leader", leaderAddr, chartLease...)
	// It syncs its caches (every pod of the fleet) before it campaigns:
	// a minute plus 20 ms a node (2m40s at 5,000 nodes) allowed.
	waitHolderWithin(b, e, "leader", time.Minute+time.Duration(nodes)*20*time.Millisecond)
	standby := e.startProcess("standby", standbyAddr, chartLease...)
	waitServing(b, standbyAddr)
	e.upgrade("1.28.1")
	sc := e.clockSwaps("1.28.1")
	apiBefore := apiserverMetrics(b, e)
	start := time.Now()
	e.apply(rollout("scale", func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(parallel), intstr.FromInt32(parallel)
		s.SwapTimeout = &v1alpha1.Duration{Duration: 5 * time.Minute}
	}))
	say("rollout applied")

	// SIGKILL the leader a third of the way through.
	doneAtKill := e.waitDone("scale", nodes/3, nodes, say)
	leaderFams := scrape(b, leaderAddr)
	leaderRSS, leaderCPU := peakRSS(leader.cmd.Process.Pid), cpuSeconds(leader.cmd.Process.Pid)
	killed := time.Now()
	leader.kill()
	say("leader killed with %d nodes done", doneAtKill)
	waitHolder(b, e, "standby")
	acquired := time.Since(killed)
	firstWrite := waitFirstWrite(b, standbyAddr, killed)
	say("standby holds the Lease after %.2fs, first write after %.2fs", acquired.Seconds(), firstWrite.Seconds())

	// All but the last wave at waitDone's pace, the end at waitPhase's 200 ms.
	e.waitDone("scale", nodes-parallel, nodes, say)
	nr := e.waitPhase("scale", 60*time.Minute, v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted)
	wall := time.Since(start)
	time.Sleep(200 * time.Millisecond)
	sc.stop()
	apiAfter := apiserverMetrics(b, e)
	if nr.Status.Phase != v1alpha1.PhaseCompleted {
		b.Fatalf("phase %s: %s", nr.Status.Phase, nr.Status.HaltReason)
	}
	standbyFams := scrape(b, standbyAddr)
	standbyRSS, standbyCPU := peakRSS(standby.cmd.Process.Pid), cpuSeconds(standby.cmd.Process.Pid)
	standby.kill()
	say("rollout Completed")

	floor, barrierFloor, waves := swapFloors(nr, parallel, sc)
	if c := sc.clocked(); c < nodes {
		b.Errorf("the swap clock saw %d of %d nodes' swaps: the floor leaves the others out", c, nodes)
	}
	verbs := requestsByVerb(leaderFams)
	for v, n := range requestsByVerb(standbyFams) {
		verbs[v] += n
	}
	var vs []string
	var writes, reads float64
	for v, n := range verbs {
		vs = append(vs, fmt.Sprintf("%s=%.2f", v, n/float64(nodes)))
		switch v {
		case "create", "update", "patch", "delete":
			writes += n
		case "get", "list":
			reads += n
		}
	}
	sort.Strings(vs)
	leaseReads := leaseReads(leaderFams) + leaseReads(standbyFams)
	p99 := requestP99(apiBefore, apiAfter)
	size1, _, _ := statusSize(b, nr, 1)
	size5k, fit5k, trimmed5k := statusSize(b, nr, int(math.Ceil(5000/float64(nodes))))

	native := e.nativeRollingUpdate("1.28.2", parallel, nodes)
	say("native RollingUpdate done")

	rss := max(leaderRSS, standbyRSS)
	fmt.Printf("nodewise %d nodes in %d zones, %d waves (maxParallel %d), zero soak, surge: wall %s, floor %s (wall/floor %.2f); wave-barrier floor %s\n",
		nodes, zones, waves, parallel, wall.Round(10*time.Millisecond), floor.Round(10*time.Millisecond), wall.Seconds()/floor.Seconds(), barrierFloor.Round(10*time.Millisecond))
	fmt.Printf("native DaemonSet RollingUpdate (maxUnavailable %d, both DaemonSets at once): wall %s; nodewise/native = %.2f\n",
		parallel, native.Round(10*time.Millisecond), wall.Seconds()/native.Seconds())
	fmt.Printf("API requests per node by verb (leader + successor): %s; writes %.2f, reads (get+list) %.3f\n", strings.Join(vs, " "), writes/float64(nodes), reads/float64(nodes))
	fmt.Printf("the same by verb and resource: %s\n", requestsByResource(nodes, leaderFams, standbyFams))
	fmt.Printf("reads of the Leases over the run (leader election; a standby watches its Lease, leader/lock.go): %.0f; reads per node without them: %.3f\n",
		leaseReads, (reads-leaseReads)/float64(nodes))
	fmt.Printf("mean time per node in each step, successor: %s\n", stepMeans(standbyFams))
	inSlot, swapped, busy := slotUse(nr, sc, parallel, wall)
	fmt.Printf("a node in its slot, cordon to uncordon (as the cluster saw them): mean %.2f s, of which its swaps as the cluster saw them %.2f s; the %d slots were busy %.0f%% of the wall\n",
		inSlot.Seconds(), swapped.Seconds(), parallel, 100*busy)
	fmt.Printf("orchestrator peak RSS: leader %.1f MiB (killed at %d/%d), successor %.1f MiB; CPU: leader %.1f s, successor %.1f s\n",
		float64(leaderRSS)/1024, doneAtKill, nodes, float64(standbyRSS)/1024, leaderCPU, standbyCPU)
	fmt.Printf("API server request latency p99 during the rollout (non-watch, from apiserver_request_duration_seconds): %s\n", p99)
	fmt.Printf("leader handover after SIGKILL (lease 15 s, retry period 2 s): Lease taken %.2f s, first write %.2f s\n", acquired.Seconds(), firstWrite.Seconds())
	fmt.Printf("NodeRollout object: %d KiB at %d nodes; built at %d nodes: %d KiB as is, %d KiB as the status writer writes it (%d entries trimmed; etcd's default limit 1.5 MiB)\n",
		size1/1024, nodes, nodes*int(math.Ceil(5000/float64(nodes))), size5k/1024, fit5k/1024, trimmed5k)
	fmt.Printf("at rest, per simulated node: %s\n", perNode)
	fmt.Printf("scale nodes=%d wall_s=%.1f floor_s=%.1f native_s=%.1f writes_per_node=%.2f reads_per_node=%.3f rss_mib=%.0f handover_s=%.2f apps_per_node=%d\n",
		nodes, wall.Seconds(), floor.Seconds(), native.Seconds(), writes/float64(nodes), reads/float64(nodes), float64(rss)/1024, firstWrite.Seconds(), appsPerNode)
	b.ReportMetric(wall.Seconds(), "wall-s")
	b.ReportMetric(floor.Seconds(), "floor-s")
	b.ReportMetric(native.Seconds(), "native-s")
	b.ReportMetric(float64(rss)/1024, "peakRSS-MiB")
}

// fillApps runs a Deployment of n one-container pods spread over the nodes
// and waits until all are available.
func (e *env) fillApps(n int, say func(string, ...any)) {
	e.t.Helper()
	ctx := context.Background()
	_, _ = e.c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fleet"}}, metav1.CreateOptions{})
	labels := map[string]string{"app": "fleet"}
	replicas := int32(n)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet", Namespace: "fleet"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}},
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.ScheduleAnyway,
						LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
					}},
				},
			},
		},
	}
	if _, err := e.c.Client.AppsV1().Deployments("fleet").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	// Counted from the pods themselves: under load the ReplicaSet
	// controller's status lags its pods by minutes (its cache behind its own
	// writes, its retries backing off), and only the pods matter here. Each
	// look lists every pod (≈ 4 KiB each), so it is made once per 1,000
	// pods-seconds at least: every 5 s, 50,000 pods would keep a core of
	// the API server busy encoding them.
	last, ready := time.Now(), 0
	every := max(5*time.Second, time.Duration(n)*time.Millisecond)
	err := wait.PollUntilContextTimeout(ctx, every, 30*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := e.c.Client.CoreV1().Pods("fleet").List(ctx, metav1.ListOptions{ResourceVersion: "0"}) // from the watch cache
		if err != nil {
			return false, nil
		}
		ready = 0
		for i := range pods.Items {
			if podutils.IsPodReady(&pods.Items[i]) {
				ready++
			}
		}
		if time.Since(last) > 30*time.Second {
			last = time.Now()
			say("app pods Ready: %d/%d", ready, n)
		}
		return ready == n, nil
	})
	if err != nil {
		e.t.Fatalf("app pods Ready: %d/%d: %v", ready, n, err)
	}
}

// restCost is what the cluster costs the API server per node at rest,
// measured over window: requests per minute (watches excluded), by resource.
func (e *env) restCost(window time.Duration, nodes int) string {
	before := apiserverMetrics(e.t, e)
	time.Sleep(window)
	after := apiserverMetrics(e.t, e)
	by := map[string]float64{}
	var total float64
	for _, m := range after["apiserver_request_total"].GetMetric() {
		l := labelMap(m.GetLabel())
		if l["verb"] == "WATCH" || l["verb"] == "CONNECT" {
			continue
		}
		d := m.GetCounter().GetValue() - counterOf(before["apiserver_request_total"], l)
		by[l["verb"]+" "+l["resource"]] += d
		total += d
	}
	perMin := func(x float64) float64 { return x / window.Minutes() / float64(nodes) }
	var parts []string
	for k, v := range by {
		if perMin(v) >= 0.05 {
			parts = append(parts, fmt.Sprintf("%s %.2f", k, perMin(v)))
		}
	}
	sort.Strings(parts)
	return fmt.Sprintf("%.2f requests/min (%s)", perMin(total), strings.Join(parts, ", "))
}

func labelMap(ls []*dtomodel.LabelPair) map[string]string {
	out := map[string]string{}
	for _, l := range ls {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

func counterOf(f *dto, want map[string]string) float64 {
	for _, m := range f.GetMetric() {
		if sameLabels(labelMap(m.GetLabel()), want) {
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func sameLabels(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// apiserverMetrics scrapes the API server's own /metrics.
func apiserverMetrics(t testing.TB, e *env) map[string]*dto {
	t.Helper()
	raw, err := e.c.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("scraping the API server: %v", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(raw)))
	if err != nil {
		t.Fatalf("parsing the API server's metrics: %v", err)
	}
	return fams
}

// requestP99 is the 99th percentile of apiserver_request_duration_seconds
// (every verb but WATCH and CONNECT) between two scrapes, interpolated
// within its bucket, with the request count.
func requestP99(before, after map[string]*dto) string {
	const name = "apiserver_request_duration_seconds"
	buckets := map[float64]float64{}
	var count float64
	for _, m := range after[name].GetMetric() {
		l := labelMap(m.GetLabel())
		if l["verb"] == "WATCH" || l["verb"] == "CONNECT" {
			continue
		}
		var prev []*dtomodel.Bucket
		var prevCount float64
		for _, o := range before[name].GetMetric() {
			if sameLabels(labelMap(o.GetLabel()), l) {
				prev, prevCount = o.GetHistogram().GetBucket(), float64(o.GetHistogram().GetSampleCount())
			}
		}
		count += float64(m.GetHistogram().GetSampleCount()) - prevCount
		for i, bk := range m.GetHistogram().GetBucket() {
			d := float64(bk.GetCumulativeCount())
			if i < len(prev) {
				d -= float64(prev[i].GetCumulativeCount())
			}
			buckets[bk.GetUpperBound()] += d
		}
	}
	var bounds []float64
	for ub := range buckets {
		bounds = append(bounds, ub)
	}
	sort.Float64s(bounds)
	rank := 0.99 * count
	lower, below := 0.0, 0.0
	for _, ub := range bounds {
		if c := buckets[ub]; c >= rank {
			if c == below {
				return fmt.Sprintf("≤ %.3f s over %.0f requests", ub, count)
			}
			return fmt.Sprintf("%.3f s over %.0f requests", lower+(ub-lower)*(rank-below)/(c-below), count)
		}
		lower, below = ub, buckets[ub]
	}
	return fmt.Sprintf("above the last bucket over %.0f requests", count)
}

func requestsByVerb(fams map[string]*dto) map[string]float64 {
	verbs := map[string]float64{}
	for _, m := range fams["nodewise_api_requests_total"].GetMetric() {
		if v := labelMap(m.GetLabel())["verb"]; v != "" {
			verbs[v] += m.GetCounter().GetValue()
		}
	}
	return verbs
}

// slotUse is where a rollout's wall time goes beyond its floor: the mean
// time a node was out (cordon to uncordon as the cluster saw them: its
// first record goes with the cordon, Done with the uncordon), the mean of
// its swaps as the cluster saw them (the floor's measure), and the share of
// slots × wall the nodes were out (the rest is the planner refilling a
// slot, and preflight before the cordon).
func slotUse(nr *v1alpha1.NodeRollout, sc *swapClock, slots int, wall time.Duration) (inSlot, swapped time.Duration, busy float64) {
	var sum, sw time.Duration
	n := 0
	for _, ns := range nr.Status.Nodes {
		out := sc.out(ns.Name)
		if out <= 0 {
			continue
		}
		sum += out
		sw += sc.took(ns.Name)
		n++
	}
	if n == 0 {
		return 0, 0, 0
	}
	return sum / time.Duration(n), sw / time.Duration(n), sum.Seconds() / (float64(slots) * wall.Seconds())
}

// leaseReads counts the GETs and LISTs of Leases in a scrape (leader election).
func leaseReads(fams map[string]*dto) float64 {
	var n float64
	for _, m := range fams["nodewise_api_requests_total"].GetMetric() {
		if l := labelMap(m.GetLabel()); l["resource"] == "leases" && (l["verb"] == "get" || l["verb"] == "list") {
			n += m.GetCounter().GetValue()
		}
	}
	return n
}

// requestsByResource sums nodewise_api_requests_total over the scrapes by
// verb and resource, per node.
func requestsByResource(nodes int, scrapes ...map[string]*dto) string {
	by := map[string]float64{}
	for _, fams := range scrapes {
		for _, m := range fams["nodewise_api_requests_total"].GetMetric() {
			l := labelMap(m.GetLabel())
			by[l["verb"]+" "+l["resource"]] += m.GetCounter().GetValue()
		}
	}
	var out []string
	for k, v := range by {
		if v/float64(nodes) >= 0.005 {
			out = append(out, fmt.Sprintf("%s=%.2f", k, v/float64(nodes)))
		}
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// statusSize is the JSON size of nr with its node entries repeated copies
// times under new names (copies 1 is the object as it is), and the size
// after write.FitStatus, with how many entries that trimmed.
func statusSize(t testing.TB, nr *v1alpha1.NodeRollout, copies int) (asIs, fit, trimmed int) {
	t.Helper()
	big := nr.DeepCopy()
	big.ManagedFields = nil
	for c := 1; c < copies; c++ {
		for _, n := range nr.Status.Nodes {
			n.Name = fmt.Sprintf("%s-copy%d", n.Name, c)
			big.Status.Nodes = append(big.Status.Nodes, n)
		}
	}
	size := func() int {
		data, err := json.Marshal(big)
		if err != nil {
			t.Fatal(err)
		}
		return len(data)
	}
	asIs = size()
	trimmed, _ = write.FitStatus(&big.Status)
	return asIs, size(), trimmed
}

// waitDone waits until at least n nodes of the rollout are Done and returns
// how many are. Each look reads the whole NodeRollout (≈ 0.35 KiB a node, up
// to the status budget's 1 MiB), so it looks every 200 µs per node of the
// fleet, at least every 200 ms: 5 reads a second of a 1 MiB object would be
// a cost of the benchmark's own on the API server.
func (e *env) waitDone(name string, n int, fleet int, say func(string, ...any)) int {
	e.t.Helper()
	var done int
	last := time.Now()
	every := max(200*time.Millisecond, time.Duration(fleet)*200*time.Microsecond)
	err := wait.PollUntilContextTimeout(context.Background(), every, 60*time.Minute, true, func(ctx context.Context) (bool, error) {
		nr, err := e.rollouts.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if nr.Status.Phase == v1alpha1.PhaseHalted {
			return false, fmt.Errorf("halted: %s", nr.Status.HaltReason)
		}
		done = int(nr.Status.Counts.Done)
		if time.Since(last) > 15*time.Second {
			last = time.Now()
			say("%d nodes done", done)
		}
		return done >= n, nil
	})
	if err != nil {
		e.t.Fatalf("waiting for %d nodes done: %v", n, err)
	}
	return done
}

// waitServing waits until an orchestrator serves its metrics at addr.
func waitServing(t testing.TB, addr string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		_, err := scrapeQuiet(addr)
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("no metrics at %s: %v", addr, err)
	}
}

// waitFirstWrite polls the orchestrator at addr until it has made a write
// request (create, update, patch or delete), and returns the time since since.
func waitFirstWrite(t testing.TB, addr string, since time.Time) time.Duration {
	t.Helper()
	var took time.Duration
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		fams, err := scrapeQuiet(addr)
		if err != nil {
			return false, nil
		}
		if writes(fams) > 0 { // its own Lease left out
			took = time.Since(since)
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the successor made no write: %v", err)
	}
	return took
}

// cpuSeconds is a process's user+system CPU time so far.
func cpuSeconds(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The fields after the command name (in parentheses, which may hold spaces).
	f := strings.Fields(string(data)[strings.LastIndexByte(string(data), ')')+2:])
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100 // USER_HZ
}
