package sidecar

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/kubectl/pkg/util/podutils"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/revisions"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/sim/injector"
	"github.com/nodewise/nodewise/test/testkit"
)

type env struct {
	// events records the Events of the last controller started.
	events *record.FakeRecorder
	t      *testing.T
	ctx    context.Context
	c      *cluster.Cluster
	inj    *injector.Server
	mc     v1alpha1.RevisionMigrationInterface
}

// start boots a cluster, registers the test injector for every version and
// installs those Istio versions (the first one gets the default tag).
func start(t *testing.T, nodes int, versions ...string) *env {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	inj, err := injector.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inj.Close)
	c := cluster.Start(t, cluster.Options{Nodes: nodes, Zones: 3})
	for _, v := range versions {
		rev, err := cluster.Revision(v)
		if err != nil {
			t.Fatal(err)
		}
		inj.SetRevision(rev, v)
		if err := cluster.InstallIstio(ctx, c.Client, cluster.IstioOptions{Version: v, InjectorURL: inj.URL, CABundle: inj.CABundle, SkipSamples: true}); err != nil {
			t.Fatal(err)
		}
	}
	cluster.InstallCRDs(t, c, testkit.CRD(testkit.RevisionMigrationsCRD))
	nwc, err := v1alpha1.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	mc := nwc.RevisionMigrations()
	return &env{t: t, ctx: ctx, c: c, inj: inj, mc: mc}
}

// app is a workload the tests put in a namespace.
type app struct {
	name     string
	replicas int32
	sts      bool
	ds       bool // a DaemonSet (one pod per node, no PDB)
}

// namespace creates a namespace with labels, apps and a maxUnavailable=1 PDB per app.
func (e *env) namespace(name string, labels map[string]string, apps ...app) {
	e.t.Helper()
	ctx, cs := e.ctx, e.c.Client
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.apps(name, apps...)
}

// apps creates apps, each with a maxUnavailable=1 PDB, in an existing namespace.
func (e *env) apps(name string, apps ...app) {
	e.t.Helper()
	ctx, cs := e.ctx, e.c.Client
	for _, a := range apps {
		l := map[string]string{"app": a.name}
		tmpl := corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: l},
			Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: ptr(int64(1)),
				Containers:                    []corev1.Container{{Name: a.name, Image: "docker.io/nodewise/sample-" + a.name + ":1.0"}},
			},
		}
		r := a.replicas
		var err error
		if a.ds {
			if _, err := cs.AppsV1().DaemonSets(name).Create(ctx, &appsv1.DaemonSet{
				ObjectMeta: metav1.ObjectMeta{Name: a.name, Namespace: name},
				Spec:       appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: l}, Template: tmpl},
			}, metav1.CreateOptions{}); err != nil {
				e.t.Fatal(err)
			}
			continue
		}
		if a.sts {
			_, err = cs.AppsV1().StatefulSets(name).Create(ctx, &appsv1.StatefulSet{
				ObjectMeta: metav1.ObjectMeta{Name: a.name, Namespace: name},
				Spec: appsv1.StatefulSetSpec{Replicas: &r, Selector: &metav1.LabelSelector{MatchLabels: l}, Template: tmpl,
					ServiceName: a.name, PodManagementPolicy: appsv1.ParallelPodManagement},
			}, metav1.CreateOptions{})
		} else {
			_, err = cs.AppsV1().Deployments(name).Create(ctx, &appsv1.Deployment{
				ObjectMeta: metav1.ObjectMeta{Name: a.name, Namespace: name},
				Spec:       appsv1.DeploymentSpec{Replicas: &r, Selector: &metav1.LabelSelector{MatchLabels: l}, Template: tmpl},
			}, metav1.CreateOptions{})
		}
		if err != nil {
			e.t.Fatal(err)
		}
		one := intstr.FromInt32(1)
		if _, err := cs.PolicyV1().PodDisruptionBudgets(name).Create(ctx, &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: a.name, Namespace: name},
			Spec:       policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &one, Selector: &metav1.LabelSelector{MatchLabels: l}},
		}, metav1.CreateOptions{}); err != nil {
			e.t.Fatal(err)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// proxies returns, for a namespace, the proxy image tag of each Ready,
// non-terminating pod ("" for a pod without a sidecar), and how many pods are not Ready.
func (e *env) proxies(ns string) (tags map[string]string, notReady int) {
	pods, err := e.c.Client.CoreV1().Pods(ns).List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	tags = map[string]string{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		if !podutils.IsPodReady(&p) {
			notReady++
			continue
		}
		tags[p.Name] = ""
		for _, c := range p.Spec.Containers {
			if c.Name == "istio-proxy" {
				tags[p.Name] = strings.TrimPrefix(c.Image, "docker.io/istio/proxyv2:")
			}
		}
	}
	return tags, notReady
}

// allOn waits until every pod of the namespaces is Ready with proxy version.
func (e *env) allOn(timeout time.Duration, version string, wantPods int, nss ...string) {
	e.t.Helper()
	testkit.WaitFor(e.t, timeout, "pods on "+version, func() (bool, error) {
		for _, ns := range nss {
			tags, notReady := e.proxies(ns)
			if notReady > 0 || len(tags) != wantPods {
				return false, fmt.Errorf("%s: %d ready, %d not ready", ns, len(tags), notReady)
			}
			for p, v := range tags {
				if v != version {
					return false, fmt.Errorf("%s/%s runs %q", ns, p, v)
				}
			}
		}
		return true, nil
	})
}

// controller runs a migration controller as the cluster admin until the
// returned stop is called.
func (e *env) controller(gate revisions.Gate) (stop func()) {
	return e.controllerAs(gate, e.c.Config)
}

// controllerAs runs a migration controller with the given credentials.
func (e *env) controllerAs(gate revisions.Gate, cfg *rest.Config) (stop func()) {
	return e.controllerWith(revisions.Config{Gate: gate}, cfg)
}

// controllerWith runs a migration controller configured as rc (its
// clients, log, registry, interval and events filled in) with the given
// credentials.
func (e *env) controllerWith(rc revisions.Config, cfg *rest.Config) (stop func()) {
	ctx, cancel := context.WithCancel(e.ctx)
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	nwc, err := v1alpha1.NewForConfig(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	mc := nwc.RevisionMigrations()
	e.events = record.NewFakeRecorder(1000)
	rc.Kube, rc.Migrations, rc.Log = kube, mc, zaptest.NewLogger(e.t).Named("migration")
	rc.Registry, rc.Interval, rc.Events = prometheus.NewRegistry(), 200*time.Millisecond, e.events
	ctrl, err := revisions.New(rc)
	if err != nil {
		e.t.Fatal(err)
	}
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
	e.t.Cleanup(stop)
	return stop
}

func (e *env) migration(name string) *v1alpha1.RevisionMigration {
	e.t.Helper()
	rm, err := e.mc.Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return rm
}

func (e *env) waitPhase(name string, timeout time.Duration, phases ...v1alpha1.MigrationPhase) *v1alpha1.RevisionMigration {
	e.t.Helper()
	var rm *v1alpha1.RevisionMigration
	testkit.WaitFor(e.t, timeout, fmt.Sprintf("%s in %v", name, phases), func() (bool, error) {
		rm = e.migration(name)
		for _, p := range phases {
			if rm.Status.Phase == p {
				return true, nil
			}
		}
		return false, fmt.Errorf("phase %s wave %d: %s", rm.Status.Phase, rm.Status.CurrentWave, rm.Status.Reason)
	})
	return rm
}

// abort sets spec.abort, retrying while the controller's status writes conflict.
func (e *env) abort(name string, scope v1alpha1.AbortScope) {
	e.t.Helper()
	// A merge patch of the one field, as a person's `kubectl patch` would:
	// no resourceVersion, so the controller's status writes (one a restart)
	// cannot make it conflict (a read-modify-update lost to them in CI).
	patch := fmt.Sprintf(`{"spec":{"abort":%q}}`, scope)
	if _, err := e.mc.Patch(e.ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		e.t.Fatalf("aborting %s: %v", name, err)
	}
}
