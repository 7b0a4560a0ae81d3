package main

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/revisions/revtag"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/sim/injector"
	"github.com/nodewise/nodewise/test/testkit"
)

// TestSidecarCommands runs the real binary's sidecar commands against the
// simulated cluster: what they print, and that bad input exits non-zero with
// one line on stderr and changes nothing.
func TestSidecarCommands(t *testing.T) {
	bin := testkit.Binary(t, "nodewise")
	ctx := context.Background()
	inj, err := injector.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer inj.Close()
	c := cluster.Start(t, cluster.Options{Nodes: 3, Zones: 3})
	for v, rev := range map[string]string{"1.27.3": "1-27", "1.28.1": "1-28"} {
		inj.SetRevision(rev, v)
	}
	for _, v := range []string{"1.27.3", "1.28.1"} {
		if err := cluster.InstallIstio(ctx, c.Client, cluster.IstioOptions{Version: v, InjectorURL: inj.URL, CABundle: inj.CABundle, SkipSamples: true}); err != nil {
			t.Fatal(err)
		}
	}
	installRevisionMigrationCRD(t, c)
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"istio.io/rev": "1-27"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "sample:1"}}}}
	if _, err := c.Client.CoreV1().Pods("shop").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kc := "--kubeconfig=" + c.Kubeconfig

	ok := func(args ...string) string {
		t.Helper()
		out, errOut, err := run(bin, append([]string{kc}, args...)...)
		if err != nil {
			t.Fatalf("nodewise %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		return out
	}
	bad := func(want string, args ...string) {
		t.Helper()
		out, errOut, err := run(bin, append([]string{kc}, args...)...)
		if err == nil {
			t.Fatalf("nodewise %s succeeded; want an error with %q", strings.Join(args, " "), want)
		}
		if out != "" || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || !strings.Contains(errOut, want) {
			t.Fatalf("nodewise %s: stdout %q, stderr %q; want nothing on stdout and one line with %q", strings.Join(args, " "), out, errOut, want)
		}
	}

	// inventory: the injected pod, in both formats.
	var inv inventory.Inventory
	if err := json.Unmarshal([]byte(ok("inventory", "-o", "json")), &inv); err != nil {
		t.Fatal(err)
	}
	if len(inv.Pods) != 1 || inv.Pods[0].Version != "1.27.3" || inv.Pods[0].Revision != "1-27" {
		t.Fatalf("inventory pods %+v", inv.Pods)
	}
	if table := ok("inventory"); !strings.Contains(table, "shop") || !strings.Contains(table, "1.27.3") {
		t.Fatalf("inventory table:\n%s", table)
	}
	bad("want table, json, yaml, name or jsonpath", "inventory", "-o", "wide")
	if out := ok("inventory", "-o", "jsonpath={.pods[0].version}"); out != "1.27.3" {
		t.Fatalf("inventory -o jsonpath: %q", out)
	}
	if out := ok("inventory", "-o", "name"); out != "pod/shop/web\n" {
		t.Fatalf("inventory -o name: %q", out)
	}

	// skew.
	if out := ok("skew"); !strings.Contains(out, "no skew violations") {
		t.Fatalf("skew: %s", out)
	}
	if out := ok("skew", "plan", "--from", "1.26.0", "--to", "1.28.1"); !strings.Contains(out, "pass 2: 1.27 -> 1.28") {
		t.Fatalf("skew plan: %s", out)
	}
	bad("unknown component", "skew", "--max-behind", "gateway=1")
	for _, o := range []string{"yaml", "json", "name", "jsonpath={.components}"} {
		ok("skew", "-o", o)
		ok("skew", "policy", "-o", o)
		ok("skew", "plan", "--from", "1.26.0", "--to", "1.28.1", "-o", o)
	}
	if out := ok("skew", "plan", "--from", "1.26.0", "--to", "1.28.1", "-o", "jsonpath={[*].to}"); out != "1.27 1.28" {
		t.Fatalf("skew plan -o jsonpath: %q", out)
	}
	// A sidecar four minors behind its istiod: skew reports it and exits 4,
	// in every -o, so a pipeline can gate on it.
	legacy := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "old", Namespace: "legacy", Annotations: map[string]string{"sidecar.istio.io/status": `{"revision":"1-28"}`}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "sample:1"}, {Name: "istio-proxy", Image: "docker.io/istio/proxyv2:1.24.0"}}}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "legacy"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Pods("legacy").Create(ctx, legacy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, o := range []string{"table", "name", "yaml", "jsonpath={.violations[0].subject}"} {
		out, errOut, err := run(bin, kc, "skew", "-o", o)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitViolation || !strings.Contains(out, "old") || !strings.Contains(errOut, "outside the supported skew") {
			t.Fatalf("skew -o %s with a violation: %v, stdout %q, stderr %q; want exit %d naming legacy/old", o, err, out, errOut, exitViolation)
		}
	}
	if err := c.Client.CoreV1().Pods("legacy").Delete(ctx, "old", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}

	// tags.
	bad(`unknown revision "1-99"`, "tag", "set", "canary", "--revision", "1-99")
	ok("tag", "set", "canary", "--revision", "1-28")
	bad("pass --overwrite", "tag", "set", "canary", "--revision", "1-27")
	if rev, _ := revtag.Get(ctx, c.Client, "canary"); rev != "1-28" {
		t.Fatalf("a refused tag set moved canary to %s", rev)
	}
	if out := ok("tag", "set", "canary", "--revision", "1-27", "--overwrite", "-o", "jsonpath={.tag} {.revision}"); out != "canary 1-27" {
		t.Fatalf("tag set -o jsonpath: %q", out)
	}
	if out := ok("tag", "set", "spare", "--revision", "1-28", "-o", "yaml"); !strings.Contains(out, "tag: spare") || !strings.Contains(out, "revision: 1-28") {
		t.Fatalf("tag set -o yaml:\n%s", out)
	}
	if out := ok("tag", "remove", "spare", "-o", "jsonpath={.revision}"); out != "1-28" {
		t.Fatalf("tag remove -o jsonpath: %q", out)
	}
	if out := ok("tag", "list"); !strings.Contains(strings.Join(strings.Fields(out), " "), "canary 1-27") {
		t.Fatalf("tag list:\n%s", out)
	}
	bad("unknown revision tag", "tag", "remove", "nope")

	// revision remove is refused while a proxy runs it.
	bad("1 proxies in namespace shop", "revision", "remove", "1-27")

	// revision migrate: bad input changes nothing.
	bad("podsPerSecond must be greater than 0", "revision", "migrate", "--from", "1-27", "--to", "1-28")
	bad("selectors overlap", "revision", "migrate", "--from", "1-27", "--to", "1-28", "--rate", "2", "--wave", "a=tier=1", "--wave", "b=team=x")
	bad(`unknown revision "1-99"`, "revision", "migrate", "--from", "1-27", "--to", "1-99", "--rate", "2")
	bad("stableTag cannot be the default tag", "revision", "migrate", "--from", "1-27", "--to", "1-28", "--rate", "2", "--stable-tag", "default")
	bad("pass --overwrite", "revision", "migrate", "--from", "1-27", "--to", "1-28", "--rate", "2")
	bad("--prometheus: gates.prometheus.address \"http://prometheus.example.com:9090\"", "revision", "migrate", "--from", "1-27", "--to", "1-28", "--rate", "2", "--tag", "next",
		"--prometheus", "http://prometheus.example.com:9090")
	bad(`waypoints "Include": want Exclude or Only`, "revision", "migrate", "--from", "1-27", "--to", "1-28", "--rate", "2", "--waypoints", "Include")
	bad("a waypoints: Only migration has none", "revision", "migrate", "--from", "1-27", "--to", "1-28", "--rate", "2", "--waypoints", "Only", "--stable-tag", "prod")
	if out := ok("revision", "migrate", "--from", "1-27", "--to", "1-28", "--rate", "2", "--tag", "next", "--waypoints", "Only", "--dry-run"); !strings.Contains(out, "waypoints: Only\n") || !strings.Contains(out, "the waypoint Gateways on 1-27") ||
		!strings.Contains(out, "waypoints: relabelled in place (istiod 1.28") {
		t.Fatalf("revision migrate --waypoints Only --dry-run:\n%s", out)
	}
	bad("--builtin-gates=false needs --prometheus", "revision", "migrate", "--from", "1-27", "--to", "1-28", "--rate", "2", "--tag", "next", "--builtin-gates=false")
	plan := ok("revision", "migrate", "--from", "1-27", "--to", "1-28", "--rate", "2", "--tag", "next", "--stable-tag", "prod", "--dry-run", "--prometheus", "http://prometheus.monitoring.svc:9090")
	if !strings.Contains(plan, "# gates from http://prometheus.monitoring.svc:9090: built-in config acceptance (istiod 1-28's rejected configs against 1-27's), built-in retry volume") ||
		!strings.Contains(plan, "address: http://prometheus.monitoring.svc:9090") || !strings.Contains(plan, "stableTag: prod") {
		t.Fatalf("dry run:\n%s", plan)
	}
	nwc, err := v1alpha1.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	mc := nwc.RevisionMigrations()
	if l, err := mc.List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 0 {
		t.Fatalf("bad input created migrations: %v %v", l, err)
	}
	if out := ok("revision", "migrate", "--from", "1-27", "--to", "1-28", "--rate", "2", "--tag", "next", "--wave", "t1=tier=1", "--wave", "all=100%",
		"--prometheus", "http://prometheus.monitoring.svc:9090", "--builtin-gates=false", "-o", "name"); out != "revisionmigration.nodewise.io/1-27-to-1-28\n" {
		t.Fatalf("revision migrate -o name: %q", out)
	}
	// revision status, pause and resume (no controller runs here: the
	// status is what the test writes).
	if out := ok("revision", "pause", "1-27-to-1-28", "-o", "jsonpath={.spec.paused}"); out != "true" {
		t.Fatalf("revision pause -o jsonpath: %q", out)
	}
	if out := ok("revision", "status", "1-27-to-1-28"); !strings.Contains(out, "revisionmigration 1-27-to-1-28: 1-27 -> 1-28 via tag next") || !strings.Contains(out, "(spec.paused)") {
		t.Fatalf("revision status:\n%s", out)
	}
	if out := ok("revision", "resume", "1-27-to-1-28", "-o", "yaml"); !strings.Contains(out, "kind: RevisionMigration") || !strings.Contains(out, "nodewise.io/resume-token") || strings.Contains(out, "paused: true") {
		t.Fatalf("revision resume -o yaml:\n%s", out)
	}
	if out, _, err := run(bin, kc, "revision", "status", "1-27-to-1-28", "-w", "--timeout", "1s"); exitStatus(err) != exitTimeout || !strings.Contains(out, "phase") {
		t.Fatalf("revision status -w on a live migration: %v, stdout %q; want exit %d after the timeout", err, out, exitTimeout)
	}
	rm, err := mc.Get(ctx, "1-27-to-1-28", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rm.Status = v1alpha1.RevisionMigrationStatus{Phase: v1alpha1.MigrationHalted, Reason: "wave t1 failed its gate: test", ObservedGeneration: rm.Generation,
		Waves: []v1alpha1.ResolvedWave{{Name: "t1", Namespaces: []string{"shop"}}}, Namespaces: []v1alpha1.NamespaceStatus{{Name: "shop", Phase: v1alpha1.NamespaceReady, Pods: 1}}}
	if _, err := mc.UpdateStatus(ctx, rm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, o := range []string{"table", "jsonpath={.status.phase}"} {
		out, errOut, err := run(bin, kc, "revision", "status", "1-27-to-1-28", "-w", "-o", o)
		if exitStatus(err) != exitHalted || !strings.Contains(out, "Halted") || !strings.Contains(errOut, "failed its gate") {
			t.Fatalf("revision status -w -o %s of a halted migration: %v, stdout %q, stderr %q; want exit %d", o, err, out, errOut, exitHalted)
		}
	}
	if out := ok("revision", "abort", "1-27-to-1-28", "-o", "jsonpath={.spec.abort}"); out != string(v1alpha1.AbortAll) {
		t.Fatalf("revision abort -o jsonpath: %q", out)
	}
	if out := ok("revision", "explain", "1-27-to-1-28", "-o", "json"); !strings.HasPrefix(out, "null") && !strings.HasPrefix(out, "[") {
		t.Fatalf("revision explain -o json: %q", out)
	}
	rm, err = mc.Get(ctx, "1-27-to-1-28", metav1.GetOptions{})
	if err != nil || rm.Spec.Abort != v1alpha1.AbortAll || rm.Spec.Tag != "next" || len(rm.Spec.Waves) != 2 ||
		rm.Spec.Gates == nil || rm.Spec.Gates.Prometheus.Address != "http://prometheus.monitoring.svc:9090" || !rm.Spec.Gates.Prometheus.BuiltIn.Disabled {
		t.Fatalf("created migration %+v %v", rm, err)
	}

	// revision remove -o of 1-28, which nothing uses (dry run: nothing goes).
	var removed removedRevision
	if err := json.Unmarshal([]byte(ok("revision", "remove", "1-28", "--dry-run", "-o", "json")), &removed); err != nil || removed.Revision != "1-28" || !removed.DryRun || len(removed.Removed) == 0 {
		t.Fatalf("revision remove --dry-run -o json: %+v %v", removed, err)
	}
	if out := ok("revision", "remove", "1-28", "--dry-run", "-o", "name"); strings.Count(out, "\n") != len(removed.Removed) {
		t.Fatalf("revision remove -o name: %q, want %v", out, removed.Removed)
	}
}

// exitStatus is the exit status of a finished command (0 for a nil error).
func exitStatus(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

func installRevisionMigrationCRD(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	if err := cluster.InstallCRD(context.Background(), c.Config, filepath.Join("..", "..", "deploy", "crds", "nodewise.io_revisionmigrations.yaml")); err != nil {
		t.Fatal(err)
	}
}
