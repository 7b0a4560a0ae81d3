package sidecar

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/istio/upgrade"
	"github.com/nodewise/nodewise/revisions"
	"github.com/nodewise/nodewise/revisions/revtag"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/testkit"
)

var gatewaysGVR = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gateways"}

// waypointFake plays istiod's waypoint controller, which nobody runs in the
// simulated cluster: for a Gateway of class istio-waypoint it creates the
// Deployment istiod would (its labels, the revision in the pod template's
// istio.io/rev annotation, that revision's proxy image), and reconcile
// updates that template when the Gateway's label has changed. The tests call
// it after each change; istiod would react to the watch.
type waypointFake struct {
	e   *env
	dyn dynamic.Interface
	// versions maps each installed revision to its proxy version.
	versions map[string]string
}

// waypoints installs the Gateway CRD and returns the stand-in.
func (e *env) waypoints(versions map[string]string) *waypointFake {
	e.t.Helper()
	if err := cluster.InstallCRD(e.ctx, e.c.Config, filepath.Join("testdata", "gateway-crd.yaml")); err != nil {
		e.t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(e.c.Config)
	if err != nil {
		e.t.Fatal(err)
	}
	return &waypointFake{e: e, dyn: dyn, versions: versions}
}

// gateway creates a waypoint Gateway, labelled istio.io/rev=rev unless rev
// is empty, and its Deployment.
func (w *waypointFake) gateway(ns, name, rev string) {
	w.e.t.Helper()
	gw := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
		"metadata": map[string]any{"namespace": ns, "name": name},
		"spec": map[string]any{"gatewayClassName": istio.WaypointGatewayClass,
			"listeners": []any{map[string]any{"name": "mesh", "port": int64(15008), "protocol": "HBONE"}}},
	}}
	if rev != "" {
		gw.SetLabels(map[string]string{istio.LabelRev: rev})
	}
	if _, err := w.dyn.Resource(gatewaysGVR).Namespace(ns).Create(w.e.ctx, gw, metav1.CreateOptions{}); err != nil {
		w.e.t.Fatal(err)
	}
	w.reconcile(ns, name)
}

// reconcile is reconcileErr, failing the test on an error.
func (w *waypointFake) reconcile(ns, name string) {
	w.e.t.Helper()
	if err := w.reconcileErr(ns, name); err != nil {
		w.e.t.Fatal(err)
	}
}

// run reconciles every waypoint Gateway every 200 ms until the test ends,
// as istiod's watch would (a failed pass is logged and retried). It stops
// before the cluster does.
func (w *waypointFake) run() {
	stop, done := make(chan struct{}), make(chan struct{})
	w.e.t.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			list, err := w.dyn.Resource(gatewaysGVR).List(w.e.ctx, metav1.ListOptions{})
			for i := 0; err == nil && i < len(list.Items); i++ {
				if err = w.reconcileErr(list.Items[i].GetNamespace(), list.Items[i].GetName()); apierrors.IsNotFound(err) {
					err = nil // deleted since the list
				}
			}
			if err == nil {
				err = w.collect(list.Items)
			}
			if err != nil {
				w.e.t.Logf("waypoint stand-in: %v", err)
			}
		}
	}()
}

// collect deletes the waypoint Deployments whose Gateway is not in gws, as
// the garbage collector does through their owner reference (which it would
// only do once its periodic discovery has found the Gateway CRD the test
// installed).
func (w *waypointFake) collect(gws []unstructured.Unstructured) error {
	have := map[string]bool{}
	for _, g := range gws {
		have[g.GetNamespace()+"/"+g.GetName()] = true
	}
	deps, err := w.e.c.Client.AppsV1().Deployments("").List(w.e.ctx, metav1.ListOptions{LabelSelector: istio.LabelGatewayManaged + "=" + istio.GatewayManagedWaypoint})
	if err != nil {
		return err
	}
	for _, d := range deps.Items {
		if !have[d.Namespace+"/"+d.Name] {
			if err := w.e.c.Client.AppsV1().Deployments(d.Namespace).Delete(w.e.ctx, d.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
	}
	return nil
}

// reconcileErr picks the Gateway's revision as istiod does (its
// istio.io/rev, else its namespace's, else the default tag; a tag resolved)
// and makes the Deployment's pod template say it.
func (w *waypointFake) reconcileErr(ns, name string) error {
	ctx, cs := w.e.ctx, w.e.c.Client
	gw, err := w.dyn.Resource(gatewaysGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	sel := gw.GetLabels()[istio.LabelRev]
	if sel == "" {
		n, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			return err
		}
		sel = n.Labels[istio.LabelRev]
	}
	if sel == "" {
		sel = istio.DefaultTag
	}
	rev := sel
	if _, ok := w.versions[sel]; !ok {
		if rev, err = revtag.Get(ctx, cs, sel); err != nil {
			return fmt.Errorf("waypoint %s/%s selects %q: %w", ns, name, sel, err)
		}
	}
	labels := map[string]string{istio.LabelGatewayManaged: istio.GatewayManagedWaypoint, istio.LabelK8sGatewayName: name, istio.LabelGatewayName: name}
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{
			Labels:      map[string]string{istio.LabelGatewayManaged: istio.GatewayManagedWaypoint, istio.LabelK8sGatewayName: name, istio.LabelInject: "false", istio.LabelDataplaneMode: istio.DataplaneModeNone},
			Annotations: map[string]string{istio.LabelRev: rev},
		},
		Spec: corev1.PodSpec{TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{Name: istio.ProxyContainer, Image: "docker.io/istio/proxyv2:" + w.versions[rev], Args: []string{"proxy", "waypoint"}}}},
	}
	deps := cs.AppsV1().Deployments(ns)
	d, err := deps.Get(ctx, name, metav1.GetOptions{})
	// Owned by its Gateway, as istiod makes it: deleting a (canary) Gateway
	// deletes its waypoint.
	owner := []metav1.OwnerReference{{APIVersion: gw.GetAPIVersion(), Kind: gw.GetKind(), Name: name, UID: gw.GetUID()}}
	switch {
	case apierrors.IsNotFound(err):
		_, err = deps.Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels, OwnerReferences: owner},
			Spec: appsv1.DeploymentSpec{Replicas: ptr(int32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{istio.LabelK8sGatewayName: name}}, Template: tmpl}}, metav1.CreateOptions{})
	case err == nil && d.Spec.Template.Annotations[istio.LabelRev] != rev:
		d.Spec.Template = tmpl
		_, err = deps.Update(ctx, d, metav1.UpdateOptions{})
	}
	return err
}

// nodewiseFails runs the CLI expecting it to fail and returns its stderr.
func nodewiseFails(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, args...).Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("nodewise %s: want a failure, got %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(ee.Stderr)
}

// TestWaypointsThroughTheUpgrade: three waypoints (two on 1-27, one by its
// namespace having no label and the default tag on 1-27; one on 1-28) show in
// `nodewise inventory` with their revisions and versions, `freshness` names
// the stale ones, `revision remove 1-28` is refused while the 1-28 waypoint
// runs it, naming it; `upgrade status` puts the waypoints after the node
// components, and once the RevisionMigration the plan emits has moved them
// (nodewise labelling each Gateway, the istiod stand-in rolling it), moves
// on; the real istioctl lists the waypoints on the revision nodewise set.
func TestWaypointsThroughTheUpgrade(t *testing.T) {
	e := start(t, 3, "1.27.3", "1.28.1")
	ctx, cs := e.ctx, e.c.Client
	wp := e.waypoints(map[string]string{"1-27": "1.27.3", "1-28": "1.28.1"})
	ambient := map[string]string{istio.LabelDataplaneMode: istio.DataplaneModeAmbient, istio.LabelUseWaypoint: "waypoint"}
	e.namespace("mesh", ambient)
	e.namespace("pay", map[string]string{istio.LabelDataplaneMode: istio.DataplaneModeAmbient, istio.LabelUseWaypoint: "reviews"})
	e.namespace("edge", ambient)
	wp.gateway("mesh", "waypoint", "1-27")
	wp.gateway("pay", "reviews", "")
	wp.gateway("edge", "waypoint", "1-28")
	bin := testkit.Binary(t, "nodewise")
	kc := "--kubeconfig=" + e.c.Kubeconfig
	row := func(ref, rev, version string) *regexp.Regexp {
		return regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(ref) + `\s+` + rev + `\s+` + regexp.QuoteMeta(version) + `\s+1/1$`)
	}
	testkit.WaitFor(t, time.Minute, "the waypoints Ready in the inventory", func() (bool, error) {
		out := nodewiseCLI(t, bin, kc, "inventory")
		for _, r := range []*regexp.Regexp{row("edge/waypoint", "1-28", "1.28.1"), row("mesh/waypoint", "1-27", "1.27.3"), row("pay/reviews", "1-27", "1.27.3")} {
			if !r.MatchString(out) {
				return false, errors.New("no row " + r.String() + " in\n" + out)
			}
		}
		return true, nil
	})
	if line := strings.SplitN(nodewiseCLI(t, bin, kc, "freshness", "--to", "1.28.1"), "\n", 2)[0]; !strings.Contains(line, "; waypoints: 2 of 3 behind (mesh/waypoint 1.27.3, pay/reviews 1.27.3)") {
		t.Errorf("freshness line %q does not name the two stale waypoints", line)
	}

	stderr := nodewiseFails(t, bin, kc, "revision", "remove", "1-28")
	if !strings.Contains(stderr, "refusing to remove 1-28 while waypoints edge/waypoint use it") || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
		t.Fatalf("revision remove 1-28 with a waypoint on it: %q, want one line naming edge/waypoint", stderr)
	}
	if _, err := cs.AppsV1().Deployments(cluster.IstioNamespace).Get(ctx, "istiod-1-28", metav1.GetOptions{}); err != nil {
		t.Fatalf("refused removal deleted istiod 1-28: %v", err)
	}

	// The node components replaced (what the NodeRollout does node by
	// node); the waypoints are next.
	for _, sel := range []string{"app=ztunnel", "k8s-app=istio-cni-node"} {
		if err := cs.CoreV1().Pods(cluster.IstioNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: sel}); err != nil {
			t.Fatal(err)
		}
	}
	statusLine := func() string {
		return strings.SplitN(nodewiseCLI(t, bin, kc, "upgrade", "status", "--to", "1.28.1"), "\n", 2)[0]
	}
	testkit.WaitFor(t, time.Minute, "the waypoints next", func() (bool, error) {
		l := statusLine()
		return strings.Contains(l, "waypoints (pass 1): Next"), errors.New(l)
	})
	var plan upgrade.Plan
	if err := json.Unmarshal([]byte(nodewiseCLI(t, bin, kc, "upgrade", "plan", "--to", "1.28.1", "-o", "json")), &plan); err != nil {
		t.Fatal(err)
	}
	if cur := plan.Current(); cur == nil || cur.Name != "waypoints" || strings.Count(cur.Do, "kubectl label gateway") != 2 {
		t.Fatalf("current step %+v, want the waypoints with one label change per stale waypoint", cur)
	}
	// The emitted waypoints: Only RevisionMigration, applied; the istiod
	// stand-in rolls each waypoint as its Gateway's label changes.
	var rm v1alpha1.RevisionMigration
	for _, doc := range strings.Split(nodewiseCLI(t, bin, kc, "upgrade", "plan", "--to", "1.28.1", "-o", "yaml"), "\n---\n") {
		if strings.Contains(doc, "waypoints: Only") {
			if err := yaml.UnmarshalStrict([]byte(doc), &rm); err != nil {
				t.Fatal(err)
			}
		}
	}
	if rm.Name != "waypoints-1-28" {
		t.Fatalf("upgrade plan -o yaml emits no waypoints: Only RevisionMigration")
	}
	wp.run()
	e.controllerWith(revisions.Config{Dynamic: wp.dyn}, e.c.Config)
	if _, err := e.mc.Create(ctx, &rm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitPhase(rm.Name, time.Minute, v1alpha1.MigrationSucceeded)
	testkit.WaitFor(t, time.Minute, "the waypoints rolled onto 1-28", func() (bool, error) {
		l := statusLine()
		return strings.Contains(l, "default tag (pass 1): Next"), errors.New(l)
	})

	list := runIstioctl(t, e.c.Kubeconfig, "waypoint", "list", "-A")
	for _, want := range []string{`edge\s+waypoint\s+1-28`, `mesh\s+waypoint\s+1-28`, `pay\s+reviews\s+1-28`} {
		if !regexp.MustCompile(`(?m)^` + want + `\s`).MatchString(list) {
			t.Errorf("istioctl waypoint list -A lacks %s:\n%s", want, list)
		}
	}
}

// gatewayRev is a Gateway's istio.io/rev label ("" for none).
func (w *waypointFake) gatewayRev(ns, name string) string {
	w.e.t.Helper()
	g, err := w.dyn.Resource(gatewaysGVR).Namespace(ns).Get(w.e.ctx, name, metav1.GetOptions{})
	if err != nil {
		w.e.t.Fatal(err)
	}
	return g.GetLabels()[istio.LabelRev]
}

// waypointWaves starts three ambient namespaces (tiers 1..3, 2 app pods
// each), each with a waypoint on 1-27 (wp-2's by the default tag, its
// Gateway unlabelled), the istiod stand-in reconciling them, an AgentGate
// over fake node agents, a controller, and a waypoints: Only migration to
// 1-28 at version to. With busy, every pod resets 20 times more than a
// quiet one from the start (enough events for the agents to test every
// wave against the earlier ones in a 3 s soak).
func waypointWaves(t *testing.T, to string, busy bool) (*env, *waypointFake) {
	return waypointWavesFrom(t, "1.27.3", to, busy, nil)
}

// mustRevision is cluster.Revision, failing the test on an error.
func mustRevision(t *testing.T, version string) string {
	t.Helper()
	rev, err := cluster.Revision(version)
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

// waypointNamespaces starts the cluster of waypointWaves at versions from
// and to: three ambient namespaces with their waypoints on from (wp-2's by
// the default tag), all Ready, the istiod stand-in reconciling them.
func waypointNamespaces(t *testing.T, from, to string) (*env, *waypointFake) {
	fromRev, toRev := mustRevision(t, from), mustRevision(t, to)
	e := start(t, 3, from, to)
	wp := e.waypoints(map[string]string{fromRev: from, toRev: to})
	for i := 1; i <= 3; i++ {
		ns := fmt.Sprintf("wp-%d", i)
		e.namespace(ns, map[string]string{istio.LabelDataplaneMode: istio.DataplaneModeAmbient, istio.LabelUseWaypoint: "waypoint", v1alpha1.DefaultTierLabel: fmt.Sprint(i)}, app{name: "web", replicas: 2})
		rev := fromRev
		if i == 2 {
			rev = ""
		}
		wp.gateway(ns, "waypoint", rev)
	}
	wp.run()
	testkit.WaitFor(t, time.Minute, "apps and waypoints Ready", func() (bool, error) {
		for i := 1; i <= 3; i++ {
			if tags, notReady := e.proxies(fmt.Sprintf("wp-%d", i)); len(tags) != 3 || notReady > 0 {
				return false, fmt.Errorf("wp-%d: %d Ready, %d not", i, len(tags), notReady)
			}
		}
		return true, nil
	})
	return e, wp
}

// waypointWavesFrom is waypointWaves from version from (its revision's
// Gateways labelled so) to version to, with the migration's
// waypointCanaryWeights (nil: the default).
func waypointWavesFrom(t *testing.T, from, to string, busy bool, weights []int32) (*env, *waypointFake) {
	fromRev, toRev := mustRevision(t, from), mustRevision(t, to)
	e, wp := waypointNamespaces(t, from, to)
	agents := newFakeAgents(e.c.Client)
	agents.setSurge(busy)
	gate := e.agentGate(agents)
	e.controllerWith(revisions.Config{Gate: gate, Dynamic: wp.dyn}, e.c.Config)
	if _, err := e.mc.Create(e.ctx, &v1alpha1.RevisionMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "wp"},
		Spec: v1alpha1.RevisionMigrationSpec{From: fromRev, To: toRev, Waypoints: v1alpha1.WaypointsOnly, WaypointCanaryWeights: weights, RateLimit: v1alpha1.RestartRateLimit{PodsPerSecond: 5},
			// One namespace a wave (the default waves would end with an
			// empty one for three namespaces, which no agent can judge).
			Waves: []v1alpha1.Wave{{Name: "canary", Percent: ptr(int32(33))}, {Name: "half", Percent: ptr(int32(66))}, {Name: "all", Percent: ptr(int32(100))}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return e, wp
}

// TestWaypointWaveHaltsOnFaultyBuild: a waypoints: Only migration to a 1-28
// whose waypoint resets 30% of the connections of the pods behind it moves
// the canary's Gateway (nodewise sets its istio.io/rev; the istiod stand-in
// rolls the Deployment) and halts there on the node agents' evidence; the
// later waves' Gateways and waypoint pods are untouched; the real istioctl
// reads the revisions as nodewise left them; an abort puts the canary's
// label back and its waypoint back on 1.27.3, and `revision remove 1-28`
// is then no longer refused for a waypoint.
func TestWaypointWaveHaltsOnFaultyBuild(t *testing.T) {
	e, wp := waypointWaves(t, "1.28.1-rst", false)
	untouched := podUIDs(t, e.ctx, e.c.Client, "wp-2")
	for uid := range podUIDs(t, e.ctx, e.c.Client, "wp-3") {
		untouched[uid] = true
	}
	rm := e.waitPhase("wp", 2*time.Minute, v1alpha1.MigrationHalted, v1alpha1.MigrationSucceeded)
	if rm.Status.Phase != v1alpha1.MigrationHalted || rm.Status.CurrentWave != 0 || !strings.Contains(rm.Status.Reason, "migrated pods") {
		t.Fatalf("migration %s at wave %d (%s), want Halted at the canary on the migrated pods' evidence", rm.Status.Phase, rm.Status.CurrentWave, rm.Status.Reason)
	}
	t.Logf("halted: %s", rm.Status.Reason)
	if got := rm.Status.Namespaces[0]; got.Name != "wp-1" || got.Waypoints["waypoint"] != "1-27" {
		t.Fatalf("canary status %+v, want wp-1 with its Gateway's original 1-27 recorded", got)
	}
	if a, b, c := wp.gatewayRev("wp-1", "waypoint"), wp.gatewayRev("wp-2", "waypoint"), wp.gatewayRev("wp-3", "waypoint"); a != "1-28" || b != "" || c != "1-27" {
		t.Fatalf("Gateway labels %q %q %q, want the canary's on 1-28 and the others as created", a, b, c)
	}
	for uid := range untouched {
		if !podUIDs(t, e.ctx, e.c.Client, "wp-")[uid] {
			t.Fatalf("a pod of a later wave was replaced")
		}
	}
	list := runIstioctl(t, e.c.Kubeconfig, "waypoint", "list", "-A")
	for _, want := range []string{`wp-1\s+waypoint\s+1-28`, `wp-2\s+waypoint\s+default`, `wp-3\s+waypoint\s+1-27`} {
		if !regexp.MustCompile(`(?m)^` + want + `\s`).MatchString(list) {
			t.Errorf("istioctl waypoint list -A lacks %s:\n%s", want, list)
		}
	}

	rm.Spec.Abort = v1alpha1.AbortAll
	if _, err := e.mc.Update(e.ctx, rm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rm = e.waitPhase("wp", time.Minute, v1alpha1.MigrationAborted)
	if got := wp.gatewayRev("wp-1", "waypoint"); got != "1-27" {
		t.Fatalf("after the abort the canary's Gateway is labelled %q, want 1-27", got)
	}
	testkit.WaitFor(t, time.Minute, "the canary's waypoint back on 1.27.3", func() (bool, error) {
		tags, notReady := e.proxies("wp-1")
		for p, v := range tags {
			if strings.HasPrefix(p, "waypoint-") && v == "1.27.3" && notReady == 0 && len(tags) == 3 {
				return true, nil
			}
		}
		return false, fmt.Errorf("%v, %d not Ready", tags, notReady)
	})
}

// TestWaypointWavesMoveAll: a healthy 1-28 on a busy cluster moves every
// waypoint in tier order, one wave at a time, each judged Pass by the agents; the unlabelled
// Gateway (on 1-27 by the default tag) is labelled too; every waypoint ends
// on 1.28.1 and no application pod was restarted: istiod, not nodewise,
// replaces a waypoint's pods.
func TestWaypointWavesMoveAll(t *testing.T) {
	e, wp := waypointWaves(t, "1.28.1", true)
	appPods := func() map[string]string {
		pods, err := e.c.Client.CoreV1().Pods("").List(e.ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, p := range pods.Items {
			if strings.HasPrefix(p.Namespace, "wp-") && p.DeletionTimestamp == nil {
				out[string(p.UID)] = p.Namespace + "/" + p.Name
			}
		}
		return out
	}
	apps := appPods()
	rm := e.waitPhase("wp", 2*time.Minute, v1alpha1.MigrationSucceeded, v1alpha1.MigrationHalted)
	if rm.Status.Phase != v1alpha1.MigrationSucceeded {
		t.Fatalf("migration %s: %s", rm.Status.Phase, rm.Status.Reason)
	}
	var order []string
	for i, w := range rm.Status.Waves {
		if w.Judgement != nil && w.Judgement.Outcome != "Pass" {
			t.Errorf("wave %s judged %s", w.Name, w.Judgement.Outcome)
		}
		if i > 0 && w.ReadyAt != nil && rm.Status.Waves[i-1].ReadyAt != nil && w.ReadyAt.Before(rm.Status.Waves[i-1].ReadyAt) {
			t.Errorf("wave %s Ready before wave %s", w.Name, rm.Status.Waves[i-1].Name)
		}
		order = append(order, w.Namespaces...)
	}
	if strings.Join(order, ",") != "wp-1,wp-2,wp-3" {
		t.Errorf("waves moved %v, want tier order wp-1, wp-2, wp-3", order)
	}
	for i := 1; i <= 3; i++ {
		ns := fmt.Sprintf("wp-%d", i)
		if got := wp.gatewayRev(ns, "waypoint"); got != "1-28" {
			t.Errorf("Gateway %s/waypoint labelled %q, want 1-28", ns, got)
		}
		tags, _ := e.proxies(ns)
		for p, v := range tags {
			if strings.HasPrefix(p, "waypoint-") && v != "1.28.1" {
				t.Errorf("waypoint pod %s/%s runs %q", ns, p, v)
			}
		}
	}
	now := appPods()
	if len(apps) != 6 || len(now) != 6 {
		t.Fatalf("%d application pods before, %d after, want 6", len(apps), len(now))
	}
	for uid, name := range apps {
		if _, ok := now[uid]; !ok {
			t.Errorf("application pod %s was replaced", name)
		}
	}
}
