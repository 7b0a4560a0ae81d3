package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/notify"
	"github.com/nodewise/nodewise/podage"
	"github.com/nodewise/nodewise/revisions"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/testkit"
)

// ageEnv is a cluster with two teams' workloads of two ages, a clock the
// test moves, and a webhook per route that records the notices it gets.
type ageEnv struct {
	*env
	pc v1alpha1.PodAgePolicyInterface
	// now is the controller's clock, as Unix nanoseconds: it stands still
	// until the test moves it, so young pods never age into the target.
	now        atomic.Int64
	teamA, def *inbox
	ctrlNS     string
	// rate is the policy's restart budget (default 100 pods/s, no namespace limit).
	rate v1alpha1.PodAgeRateLimit
}

// inbox is a webhook that keeps the notices it receives.
type inbox struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []notify.Event
}

func newInbox(t *testing.T) *inbox {
	in := &inbox{}
	in.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var e notify.Event
		if err := json.NewDecoder(r.Body).Decode(&e); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		in.mu.Lock()
		in.got = append(in.got, e)
		in.mu.Unlock()
	}))
	t.Cleanup(in.srv.Close)
	return in
}

// workloads is every workload named in the notices received, by team.
func (in *inbox) workloads() map[string][]string {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := map[string][]string{}
	for _, e := range in.got {
		out[e.Team] = append(out[e.Team], e.Workloads...)
	}
	return out
}

const optOutKey = v1alpha1.AnnotationMaxAgeOptOutUntil

// startAge boots the cluster with, on 1.27.3:
//
//	pa-a (team a): Deployment web (2 pods), bare pod solo: old; Deployment fresh: young
//	pa-b (team b): Deployments api, pinned (a PDB allowing 0 disruptions),
//	               expired (an opt-out in the past), optout (an opt-out ahead): old;
//	               Deployment new: young
//
// and sets the controller's clock to when the young pods were created.
func startAge(t *testing.T) *ageEnv {
	e := start(t, 3, "1.27.3")
	cluster.InstallCRDs(t, e.c, testkit.CRD(testkit.PodAgePoliciesCRD))
	nwc, err := v1alpha1.NewForConfig(e.c.Config)
	if err != nil {
		t.Fatal(err)
	}
	a := &ageEnv{env: e, pc: nwc.PodAgePolicies(), teamA: newInbox(t), def: newInbox(t), ctrlNS: "nodewise-system"}
	e.namespace("pa-a", map[string]string{"istio.io/rev": "1-27", "team": "a"}, app{name: "web", replicas: 2})
	e.namespace("pa-b", map[string]string{"istio.io/rev": "1-27", "team": "b"}, app{name: "api", replicas: 1}, app{name: "pinned", replicas: 1},
		app{name: "expired", replicas: 1}, app{name: "optout", replicas: 1})
	a.annotate("pa-b", "expired", time.Now().Add(-time.Hour))
	a.annotate("pa-b", "optout", time.Now().Add(24*time.Hour))
	zero := intstr.FromInt32(0)
	if _, err := e.c.Client.PolicyV1().PodDisruptionBudgets("pa-b").Create(e.ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "pinned-strict", Namespace: "pa-b"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &zero, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "pinned"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Client.CoreV1().Pods("pa-a").Create(e.ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "solo", Namespace: "pa-a", Labels: map[string]string{"app": "solo"}},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{Name: "solo", Image: "docker.io/nodewise/sample-solo:1.0"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.allOn(time.Minute, "1.27.3", 3, "pa-a")
	e.allOn(time.Minute, "1.27.3", 4, "pa-b")
	// The young workloads come well after the old ones: ages differ by
	// more than the notice the test lets pass, whatever the second a
	// creationTimestamp is truncated to.
	time.Sleep(5 * time.Second)
	e.apps("pa-a", app{name: "fresh", replicas: 1})
	e.apps("pa-b", app{name: "new", replicas: 1})
	e.allOn(time.Minute, "1.27.3", 4, "pa-a")
	e.allOn(time.Minute, "1.27.3", 5, "pa-b")
	a.now.Store(a.youngest().UnixNano())
	if _, err := e.c.Client.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: a.ctrlNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Client.CoreV1().Secrets(a.ctrlNS).Create(e.ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "team-a-webhook", Namespace: a.ctrlNS},
		Data:       map[string][]byte{"url": []byte(a.teamA.srv.URL)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return a
}

func (a *ageEnv) annotate(ns, name string, until time.Time) {
	a.t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, optOutKey, until.UTC().Format(time.RFC3339))
	if _, err := a.c.Client.AppsV1().Deployments(ns).Patch(a.ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		a.t.Fatal(err)
	}
}

// youngest is the creation time of the newest pod of the pa- namespaces.
func (a *ageEnv) youngest() time.Time {
	a.t.Helper()
	var out time.Time
	for _, ns := range []string{"pa-a", "pa-b"} {
		pods, err := a.c.Client.CoreV1().Pods(ns).List(a.ctx, metav1.ListOptions{})
		if err != nil {
			a.t.Fatal(err)
		}
		for _, p := range pods.Items {
			if p.CreationTimestamp.After(out) {
				out = p.CreationTimestamp.Time
			}
		}
	}
	return out
}

func (a *ageEnv) clock() time.Time { return time.Unix(0, a.now.Load()) }

// advance moves the controller's clock.
func (a *ageEnv) advance(d time.Duration) { a.now.Add(int64(d)) }

// controller runs a PodAgePolicy controller on the test's clock, sending
// notices through a notify.Notifier whose default webhook is a.def.
func (a *ageEnv) controller(gate revisions.Gate) { a.controllerWith(a.c.Client, gate) }

// controllerWith runs a controller that reaches the cluster through kube;
// stop ends it.
func (a *ageEnv) controllerWith(kube kubernetes.Interface, gate revisions.Gate) (stop func()) {
	a.t.Helper()
	n, err := notify.New(notify.Config{Source: noRollouts{}, Cluster: "test", URL: a.def.srv.URL, Format: notify.FormatGeneric})
	if err != nil {
		a.t.Fatal(err)
	}
	ctrl, err := podage.New(podage.Config{Kube: kube, Policies: a.pc, Notifier: n, Gate: gate, Namespace: a.ctrlNS,
		Interval: 200 * time.Millisecond, Now: a.clock, Log: zaptest.NewLogger(a.t).Named("podage"), Registry: prometheus.NewRegistry()})
	if err != nil {
		a.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(a.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = ctrl.Run(ctx) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	a.t.Cleanup(stop)
	return stop
}

type noRollouts struct{}

func (noRollouts) List(context.Context, metav1.ListOptions) (*v1alpha1.NodeRolloutList, error) {
	return &v1alpha1.NodeRolloutList{}, nil
}

// window is a maintenance window around the clock (open) or hours away
// from it (closed), in UTC.
func (a *ageEnv) window(open bool) v1alpha1.MaintenanceWindow {
	now := a.clock().UTC()
	start, end := now.Add(-time.Hour), now.Add(time.Hour)
	if !open {
		start, end = now.Add(2*time.Hour), now.Add(3*time.Hour)
	}
	return v1alpha1.MaintenanceWindow{Start: start.Format("15:04"), End: end.Format("15:04"), TimeZone: "UTC"}
}

// policy creates the policy: pods older than 3s miss the target, 1s notice.
func (a *ageEnv) policy(open bool, waveSize int32) {
	a.t.Helper()
	if _, err := a.pc.Create(a.ctx, &v1alpha1.PodAgePolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "age"},
		Spec: v1alpha1.PodAgePolicySpec{
			NamespaceSelector:  &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: metav1.LabelSelectorOpExists}}},
			MaxAge:             &v1alpha1.Duration{Duration: 3 * time.Second},
			Notice:             &v1alpha1.Duration{Duration: time.Second},
			MaintenanceWindows: []v1alpha1.MaintenanceWindow{a.window(open)},
			Routes:             []v1alpha1.NoticeRoute{{Team: "a", Secret: "team-a-webhook"}},
			RateLimit:          a.rateLimit(),
			WaveSize:           waveSize,
		},
	}, metav1.CreateOptions{}); err != nil {
		a.t.Fatal(err)
	}
}

// setWindow makes the policy's only maintenance window open or closed at
// the clock as it is now.
func (a *ageEnv) setWindow(open bool) {
	a.t.Helper()
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"maintenanceWindows": []v1alpha1.MaintenanceWindow{a.window(open)}}})
	if err != nil {
		a.t.Fatal(err)
	}
	if _, err := a.pc.Patch(a.ctx, "age", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		a.t.Fatal(err)
	}
}

func (a *ageEnv) rateLimit() v1alpha1.PodAgeRateLimit {
	if a.rate.PodsPerSecond == 0 {
		return v1alpha1.PodAgeRateLimit{PodsPerSecond: 100}
	}
	return a.rate
}

func (a *ageEnv) get() *v1alpha1.PodAgePolicy {
	a.t.Helper()
	p, err := a.pc.Get(a.ctx, "age", metav1.GetOptions{})
	if err != nil {
		a.t.Fatal(err)
	}
	return p
}

// pass changes the policy's spec (its wave size) and waits until the
// controller observed it: a whole pass ran on the clock as it is now.
func (a *ageEnv) pass(waveSize int) *v1alpha1.PodAgePolicy {
	a.t.Helper()
	if _, err := a.pc.Patch(a.ctx, "age", types.MergePatchType, fmt.Appendf(nil, `{"spec":{"waveSize":%d}}`, waveSize), metav1.PatchOptions{}); err != nil {
		a.t.Fatal(err)
	}
	var p *v1alpha1.PodAgePolicy
	testkit.WaitFor(a.t, 20*time.Second, "a pass on the clock as it is", func() (bool, error) {
		p = a.get()
		return p.Status.ObservedGeneration == p.Generation, fmt.Errorf("observed %d of %d", p.Status.ObservedGeneration, p.Generation)
	})
	return p
}

// records are the policy's workload records by "Kind ns/name".
func records(p *v1alpha1.PodAgePolicy) map[string]v1alpha1.PodAgeWorkload {
	out := map[string]v1alpha1.PodAgeWorkload{}
	for _, r := range p.Status.Workloads {
		out[r.Kind+" "+r.Namespace+"/"+r.Name] = r
	}
	return out
}

// stamped are the Deployments of the pa- namespaces whose template carries
// a restart stamp.
func (a *ageEnv) stamped() []string {
	a.t.Helper()
	var out []string
	for _, ns := range []string{"pa-a", "pa-b"} {
		ds, err := a.c.Client.AppsV1().Deployments(ns).List(a.ctx, metav1.ListOptions{})
		if err != nil {
			a.t.Fatal(err)
		}
		for _, d := range ds.Items {
			if d.Spec.Template.Annotations[revisions.AnnotationRestartedAt] != "" {
				out = append(out, ns+"/"+d.Name)
			}
		}
	}
	return out
}

// noticed waits until the over-age workloads are noticed and the opted-out
// one recorded, and checks that each team's webhook got its own.
func (a *ageEnv) noticed() *v1alpha1.PodAgePolicy {
	a.t.Helper()
	want := []string{"Deployment pa-a/web", "Pod pa-a/solo", "Deployment pa-b/api", "Deployment pa-b/pinned", "Deployment pa-b/expired"}
	var p *v1alpha1.PodAgePolicy
	testkit.WaitFor(a.t, 30*time.Second, "notices", func() (bool, error) {
		p = a.get()
		rs := records(p)
		for _, w := range want {
			if rs[w].NoticeSentAt == nil {
				return false, fmt.Errorf("%s not noticed yet (%s: %s)", w, p.Status.Phase, p.Status.Reason)
			}
		}
		return rs["Deployment pa-b/optout"].State == v1alpha1.WorkloadOptedOut, fmt.Errorf("optout: %+v", rs["Deployment pa-b/optout"])
	})
	rs := records(p)
	for _, young := range []string{"Deployment pa-a/fresh", "Deployment pa-b/new"} {
		if r, ok := rs[young]; ok {
			a.t.Errorf("young workload %s recorded: %+v", young, r)
		}
	}
	if r := rs["Deployment pa-b/optout"]; r.OptOutUntil == nil || r.NoticeSentAt != nil {
		a.t.Errorf("opted-out workload %+v: want its opt-out recorded and no notice", r)
	}
	if got := fmt.Sprint(a.teamA.workloads()); got != "map[a:[Deployment pa-a/web Pod pa-a/solo]]" {
		a.t.Errorf("team a's own webhook got %s", got)
	}
	if got := fmt.Sprint(a.def.workloads()); got != "map[b:[Deployment pa-b/api Deployment pa-b/expired Deployment pa-b/pinned]]" {
		a.t.Errorf("the default webhook got %s", got)
	}
	return p
}

// TestPodAgePolicyRestartsOverAgeAfterNotice: only the over-age workloads
// of both teams are restarted, each only after its team was told through
// its own route and the notice period passed, and only inside the window
// (closed, the policy restarts nothing and says when restarts resume): the
// Deployments by their own rollout restart, the bare pod by eviction; the
// one whose PDB allows no disruption is blocked and says so; a live opt-out
// protects, an expired one does not; the young workloads are left alone.
func TestPodAgePolicyRestartsOverAgeAfterNotice(t *testing.T) {
	a := startAge(t)
	a.controller(nil)
	a.policy(true, 10)
	a.noticed()
	// Half the notice: the restart budget fills, the notice has not run out.
	a.advance(500 * time.Millisecond)
	p := a.pass(9)
	if s := a.stamped(); len(s) > 0 || p.Status.Wave != 0 {
		t.Fatalf("restarted %v (wave %d) before the notice period passed", s, p.Status.Wave)
	}
	// The window closes and the notice runs out: nothing is restarted.
	a.setWindow(false)
	a.advance(600 * time.Millisecond)
	p = a.pass(8)
	if s := a.stamped(); len(s) > 0 || p.Status.Wave != 0 {
		t.Fatalf("restarted %v (wave %d) outside the window", s, p.Status.Wave)
	}
	if _, err := a.c.Client.CoreV1().Pods("pa-a").Get(a.ctx, "solo", metav1.GetOptions{}); err != nil {
		t.Fatalf("solo evicted outside the window: %v", err)
	}
	if p.Status.Phase != v1alpha1.PodAgeWaiting || p.Status.NextWindow == nil || !strings.Contains(p.Status.Reason, "outside the maintenance windows") {
		t.Errorf("status %s next window %v: %s", p.Status.Phase, p.Status.NextWindow, p.Status.Reason)
	}
	// The window opens.
	a.setWindow(true)
	testkit.WaitFor(t, 45*time.Second, "the wave", func() (bool, error) {
		p = a.get()
		rs := records(p)
		for _, w := range []string{"Deployment pa-a/web", "Pod pa-a/solo", "Deployment pa-b/api", "Deployment pa-b/expired"} {
			if rs[w].State != v1alpha1.WorkloadRestarted {
				return false, fmt.Errorf("%s %s: %s (%s)", w, rs[w].State, rs[w].Message, p.Status.Reason)
			}
		}
		return rs["Deployment pa-b/pinned"].State == v1alpha1.WorkloadBlocked && p.Status.Phase == v1alpha1.PodAgeWaiting, fmt.Errorf("%s: %s", p.Status.Phase, p.Status.Reason)
	})
	if got, want := strings.Join(a.stamped(), " "), "pa-a/web pa-b/api pa-b/expired"; got != want {
		t.Errorf("restarted %q, want %q", got, want)
	}
	if _, err := a.c.Client.CoreV1().Pods("pa-a").Get(a.ctx, "solo", metav1.GetOptions{}); err == nil {
		t.Errorf("the over-age bare pod solo was not evicted")
	}
	rs := records(p)
	if b := rs["Deployment pa-b/pinned"]; !strings.Contains(b.Message, "allows 0 disruptions") {
		t.Errorf("pinned blocked with %q, want its PDB named", b.Message)
	}
	for _, w := range []string{"Deployment pa-a/web", "Deployment pa-b/api"} {
		r := rs[w]
		at, err := time.Parse(time.RFC3339Nano, r.RestartedAt)
		if err != nil || r.NoticeSentAt == nil || at.Sub(r.NoticeSentAt.Time) < time.Second {
			t.Errorf("%s restarted at %q, noticed at %v: want the restart at least the 1s notice after it", w, r.RestartedAt, r.NoticeSentAt)
		}
	}
	if r := rs["Deployment pa-b/optout"]; r.State != v1alpha1.WorkloadOptedOut {
		t.Errorf("optout is %s, want OptedOut", r.State)
	}
}

// TestPodAgePolicyHaltsOnFaultyProxyBuild: the proxy build of the
// namespaces' revision turns faulty (its sidecars reset 30% of their
// connections) after the workloads started; the policy's first wave, one
// workload, restarts onto it, the node agents' evidence fails the wave
// against the workloads not yet restarted, and the policy halts with the
// reason and the table in status. No other workload is restarted.
func TestPodAgePolicyHaltsOnFaultyProxyBuild(t *testing.T) {
	a := startAge(t)
	a.inj.SetRevision("1-27", "1.27.4-rst")
	agents := newFakeAgents(a.c.Client)
	gate, err := revisions.NewAgentGate(revisions.AgentGateConfig{Source: agents, Soak: 3 * time.Second, Baseline: 5 * time.Second, Every: time.Second, Log: zaptest.NewLogger(t).Named("gate")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(a.ctx)
	t.Cleanup(cancel)
	go func() { _ = gate.Run(ctx) }()
	a.controller(revisions.Gates(gate))
	a.policy(true, 1)
	a.noticed()
	// Samples from before the wave: the baseline.
	time.Sleep(3 * time.Second)
	a.advance(1100 * time.Millisecond)
	var p *v1alpha1.PodAgePolicy
	testkit.WaitFor(t, 60*time.Second, "the halt", func() (bool, error) {
		p = a.get()
		if p.Status.Wave > 1 {
			t.Fatalf("wave %d started: %s", p.Status.Wave, p.Status.Reason)
		}
		return p.Status.Phase == v1alpha1.PodAgeHalted, fmt.Errorf("%s: %s", p.Status.Phase, p.Status.Reason)
	})
	t.Logf("halted: %s", p.Status.Reason)
	if !strings.Contains(p.Status.Reason, "wave 1 failed its gate") || !strings.Contains(p.Status.Reason, "resetsReceived") {
		t.Errorf("halt reason %q does not name the wave's resets", p.Status.Reason)
	}
	if j := p.Status.Judgement; j == nil || j.Outcome != "Fail" || len(j.Rows) == 0 {
		t.Errorf("judgement %+v, want a Fail with its table", j)
	}
	if got := strings.Join(a.stamped(), " "); got != "pa-a/web" {
		t.Errorf("restarted %q, want only the first wave's pa-a/web", got)
	}
	if _, err := a.c.Client.CoreV1().Pods("pa-a").Get(a.ctx, "solo", metav1.GetOptions{}); err != nil {
		t.Errorf("solo evicted after the halt: %v", err)
	}
	// The verbs `nodewise podage resume` and `abort` send: resume judges the
	// halted wave again (still faulty: halted again, nothing more restarted);
	// abort stops the policy.
	if _, err := a.pc.Patch(a.ctx, "age", types.MergePatchType, revisions.ResumePatch("r1"), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "the resumed wave judged again", func() (bool, error) {
		p = a.get()
		return p.Status.ResumeToken == "r1" && p.Status.Phase == v1alpha1.PodAgeHalted, fmt.Errorf("%s: %s", p.Status.Phase, p.Status.Reason)
	})
	if got := strings.Join(a.stamped(), " "); got != "pa-a/web" || p.Status.Wave != 1 {
		t.Errorf("after resume: wave %d, restarted %q; want wave 1 judged again and nothing more restarted", p.Status.Wave, got)
	}
	if _, err := a.pc.Patch(a.ctx, "age", types.MergePatchType, []byte(`{"spec":{"abort":"faulty 1.27.4 build"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, "aborted", func() (bool, error) {
		p = a.get()
		return p.Status.Phase == v1alpha1.PodAgeAborted, fmt.Errorf("%s: %s", p.Status.Phase, p.Status.Reason)
	})
}

// TestPodAgePolicyResumesAWaveWithoutRestartingTwice: a controller that
// records its first wave and dies before any restart reaches the cluster
// (every restart and eviction it sends fails) leaves the wave in status; a
// new controller makes exactly those restarts, with the recorded stamps,
// once each, and starts no second wave for them.
func TestPodAgePolicyResumesAWaveWithoutRestartingTwice(t *testing.T) {
	a := startAge(t)
	cfg := rest.CopyConfig(a.c.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPatch && strings.Contains(r.URL.Path, "/deployments/") || strings.HasSuffix(r.URL.Path, "/eviction") {
				return nil, errors.New("the controller died here")
			}
			return rt.RoundTrip(r)
		})
	})
	dying, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := a.controllerWith(dying, nil)
	a.policy(true, 10)
	a.noticed()
	a.advance(1100 * time.Millisecond)
	wave := []string{"Deployment pa-a/web", "Deployment pa-b/api", "Deployment pa-b/expired", "Pod pa-a/solo"}
	var p *v1alpha1.PodAgePolicy
	testkit.WaitFor(t, 20*time.Second, "the wave recorded", func() (bool, error) {
		p = a.get()
		rs := records(p)
		for _, w := range wave {
			if rs[w].State != v1alpha1.WorkloadRestarting || rs[w].RestartedAt == "" {
				return false, fmt.Errorf("%s %s (%s)", w, rs[w].State, p.Status.Reason)
			}
		}
		return true, nil
	})
	stop()
	if s := a.stamped(); len(s) > 0 {
		t.Fatalf("restarted %v by a controller whose restarts all failed", s)
	}
	recorded := records(p)
	a.controller(nil)
	testkit.WaitFor(t, 45*time.Second, "the wave finished by the new controller", func() (bool, error) {
		p = a.get()
		return p.Status.Phase == v1alpha1.PodAgeWaiting && records(p)["Deployment pa-a/web"].State == v1alpha1.WorkloadRestarted, fmt.Errorf("%s: %s", p.Status.Phase, p.Status.Reason)
	})
	if p.Status.Wave != 1 {
		t.Errorf("wave %d, want the recorded wave 1 finished", p.Status.Wave)
	}
	for _, w := range []struct{ ns, name string }{{"pa-a", "web"}, {"pa-b", "api"}, {"pa-b", "expired"}} {
		d, err := a.c.Client.AppsV1().Deployments(w.ns).Get(a.ctx, w.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := recorded["Deployment "+w.ns+"/"+w.name].RestartedAt
		if got := d.Spec.Template.Annotations[revisions.AnnotationRestartedAt]; got != want {
			t.Errorf("%s/%s stamped %q, want the recorded %q", w.ns, w.name, got, want)
		}
		rss, err := a.c.Client.AppsV1().ReplicaSets(w.ns).List(a.ctx, metav1.ListOptions{LabelSelector: "app=" + w.name})
		if err != nil {
			t.Fatal(err)
		}
		if len(rss.Items) != 2 {
			t.Errorf("%s/%s has %d ReplicaSets, want 2: restarted exactly once", w.ns, w.name, len(rss.Items))
		}
	}
}

// TestPodAgePolicyKeepsToItsRestartBudgets: the controller's clock stands
// still, so each budget holds exactly what the test lets accrue. With one
// pod a second per namespace, the first wave takes one workload of each
// namespace and the others wait for their namespace's budget; with one pod
// a second cluster-wide, the next wave takes one workload and the other
// waits for the cluster's.
func TestPodAgePolicyKeepsToItsRestartBudgets(t *testing.T) {
	a := startAge(t)
	a.rate = v1alpha1.PodAgeRateLimit{PodsPerSecond: 100, NamespacePodsPerSecond: 1}
	a.controller(nil)
	a.policy(true, 10)
	a.noticed()
	a.advance(1100 * time.Millisecond)
	var p *v1alpha1.PodAgePolicy
	testkit.WaitFor(t, 45*time.Second, "the first wave", func() (bool, error) {
		p = a.get()
		return p.Status.Wave == 1 && p.Status.Phase == v1alpha1.PodAgeWaiting, fmt.Errorf("wave %d %s: %s", p.Status.Wave, p.Status.Phase, p.Status.Reason)
	})
	if got := strings.Join(a.stamped(), " "); got != "pa-a/web pa-b/api" {
		t.Errorf("first wave restarted %q, want one workload a namespace: pa-a/web pa-b/api", got)
	}
	rs := records(p)
	for _, w := range []string{"Deployment pa-b/expired", "Pod pa-a/solo"} {
		if !strings.Contains(rs[w].Message, "namespace") || rs[w].State != v1alpha1.WorkloadNoticed {
			t.Errorf("%s %s: %q, want it waiting for its namespace's budget", w, rs[w].State, rs[w].Message)
		}
	}
	// Paused (`nodewise podage pause`): no wave starts, though the
	// namespaces' budgets now allow the two that wait.
	if _, err := a.pc.Patch(a.ctx, "age", types.MergePatchType, revisions.PausePatch(), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	a.pass(7)
	a.advance(1100 * time.Millisecond)
	if p = a.pass(6); p.Status.Phase != v1alpha1.PodAgePaused || p.Status.Wave != 1 {
		t.Fatalf("paused policy: wave %d %s: %s", p.Status.Wave, p.Status.Phase, p.Status.Reason)
	}
	// Resumed (`nodewise podage resume`) with a new budget: one pod a second
	// for the whole cluster, starting empty.
	resume := string(revisions.ResumePatch("r1"))
	resume = strings.Replace(resume, `"paused":false`, `"paused":false,"rateLimit":{"podsPerSecond":1,"namespacePodsPerSecond":100}`, 1)
	if _, err := a.pc.Patch(a.ctx, "age", types.MergePatchType, []byte(resume), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	a.pass(5) // the resume acknowledged
	a.pass(4) // a pass that looks for a wave: the new budget starts here
	a.advance(1100 * time.Millisecond)
	testkit.WaitFor(t, 45*time.Second, "the second wave", func() (bool, error) {
		p = a.get()
		return p.Status.Wave == 2 && p.Status.Phase == v1alpha1.PodAgeWaiting, fmt.Errorf("wave %d %s: %s", p.Status.Wave, p.Status.Phase, p.Status.Reason)
	})
	if got := strings.Join(a.stamped(), " "); got != "pa-a/web pa-b/api pa-b/expired" {
		t.Errorf("after the second wave restarted %q, want pa-b/expired added alone", got)
	}
	if r := records(p)["Pod pa-a/solo"]; !strings.Contains(r.Message, "restart budget (1 pods/s)") || r.State != v1alpha1.WorkloadNoticed {
		t.Errorf("solo %s: %q, want it waiting for the cluster's budget", r.State, r.Message)
	}
	if _, err := a.c.Client.CoreV1().Pods("pa-a").Get(a.ctx, "solo", metav1.GetOptions{}); err != nil {
		t.Errorf("solo evicted past the cluster's budget: %v", err)
	}
}
