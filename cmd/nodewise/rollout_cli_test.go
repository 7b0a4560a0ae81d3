package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/leader"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/testkit"
)

// TestRolloutCommandsOnTheSimCluster runs the real binary's rollout commands
// against the simulated cluster's API server. The test plays the orchestrator
// where a command waits on one (it writes the status the orchestrator would).
func TestRolloutCommandsOnTheSimCluster(t *testing.T) {
	bin := testkit.Binary(t, "nodewise")
	ctx := context.Background()
	c := cluster.Start(t, cluster.Options{Nodes: 3, Zones: 1})
	node := c.Nodes[0].Name
	kc := "--kubeconfig=" + c.Kubeconfig
	dir := t.TempDir()
	good := strings.Replace(goodRollout, "node-1", node, 1)
	cli := func(stdin string, args ...string) (string, string, error) {
		return runIn(bin, stdin, append([]string{kc}, args...)...)
	}
	bad := func(want, stdin string, args ...string) {
		t.Helper()
		out, errOut, err := cli(stdin, args...)
		oneLineFailure(t, strings.Join(args, " "), out, errOut, err, want)
	}

	// Without nodewise's CRDs: one line saying how to install them.
	bad("nodewise CRDs are not installed: run", good, "apply", "-f", "-")
	bad("nodewise CRDs are not installed: run", "", "status", "up")
	bad("nodewise CRDs are not installed: run", "", "pause", "up")

	if err := cluster.InstallCRD(ctx, c.Config, filepath.Join("..", "..", "deploy", "crds", "nodewise.io_noderollouts.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := cluster.InstallIstio(ctx, c.Client, cluster.IstioOptions{Version: "1.27.3", SkipSamples: true}); err != nil {
		t.Fatal(err)
	}
	nwc, err := v1alpha1.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	rc := nwc.NodeRollouts()

	// Bad input: one line, a non-zero exit, nothing written.
	bad("larger than 8 MiB", "", "apply", "-f", "/dev/zero")
	bad("holds 2 objects", good+"---\n"+strings.Replace(good, "name: up", "name: other", 1), "apply", "-f", "-")
	bad(`Duplicate value: "`+node+`"`, strings.Replace(good, "["+node+"]", "["+node+", "+node+"]", 1), "apply", "-f", "-")
	bad(`metadata.name: Invalid value: "UP"`, strings.Replace(good, "name: up", "name: UP", 1), "apply", "-f", "-")
	bad("ztunnel-typo not found", good+"  targets: [{namespace: istio-system, name: ztunnel-typo}]\n", "apply", "-f", "-")
	bad("-o bogus: want table", good, "apply", "-f", "-", "-o", "bogus")
	if l, err := rc.List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 0 {
		t.Fatalf("bad input wrote rollouts: %v %v", l, err)
	}

	// apply is server-side apply: a re-apply of a file without `paused:`
	// leaves a paused rollout paused.
	if out, errOut, err := cli(good, "apply", "-f", "-"); err != nil || out != "noderollout.nodewise.io/up created\n" {
		t.Fatalf("apply: %v %q %q", err, out, errOut)
	}
	if out, errOut, err := cli("", "pause", "up"); err != nil {
		t.Fatalf("pause: %v %q %q", err, out, errOut)
	}
	file := filepath.Join(dir, "up.yaml")
	if err := os.WriteFile(file, []byte(strings.Replace(good, "maxParallel: 2", "maxParallel: 3", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, errOut, err := cli("", "apply", "-f", file); err != nil || out != "noderollout.nodewise.io/up configured\n" {
		t.Fatalf("re-apply: %v %q %q", err, out, errOut)
	}
	nr, err := rc.Get(ctx, "up", metav1.GetOptions{})
	if err != nil || !nr.Spec.Paused || nr.Spec.MaxParallel != intstr.FromInt32(3) {
		t.Fatalf("after pause and a re-apply without paused: %v paused %v maxParallel %s; want still paused, maxParallel 3", err, nr.Spec.Paused, nr.Spec.MaxParallel.String())
	}
	managers := map[string]metav1.ManagedFieldsOperationType{}
	for _, m := range nr.ManagedFields {
		managers[m.Manager] = m.Operation
	}
	if managers[fieldManager] != metav1.ManagedFieldsOperationApply {
		t.Errorf("managed fields %v; want %s as an Apply manager", managers, fieldManager)
	}
	if out, _, err := cli("", "apply", "-f", file, "-o", "name"); err != nil || out != "noderollout.nodewise.io/up\n" {
		t.Errorf("apply -o name: %v %q", err, out)
	}
	// A file that sets paused: false against the pause is a conflict, said in one line.
	bad("--force-conflicts", good+"  paused: false\n", "apply", "-f", "-")

	// kubectl habits: a KUBECONFIG list, --context from its second file, -o yaml.
	other := filepath.Join(dir, "other.kubeconfig")
	if err := os.WriteFile(other, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: elsewhere, cluster: {server: \"https://127.0.0.1:1\"}}]\nusers: [{name: u, user: {token: x}}]\ncontexts: [{name: elsewhere, context: {cluster: elsewhere, user: u}}]\ncurrent-context: elsewhere\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--context", "nodewise-sim", "status", "up", "-o", "yaml")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+other+string(os.PathListSeparator)+c.Kubeconfig)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("KUBECONFIG=a:b nodewise --context nodewise-sim status up -o yaml: %v %s", err, e.String())
	}
	var got v1alpha1.NodeRollout
	if err := yaml.UnmarshalStrict(o.Bytes(), &got); err != nil || got.Kind != "NodeRollout" || got.Name != "up" || !got.Spec.Paused {
		t.Fatalf("status -o yaml: %v %+v\n%s", err, got.TypeMeta, o.String())
	}

	// status -w ends on a terminal phase: 0 for Completed, 2 for Halted;
	// into a pipe it draws no screen-clearing escapes.
	if _, errOut, err := cli(strings.Replace(good, "name: up", "name: halts", 1), "apply", "-f", "-"); err != nil {
		t.Fatal(errOut)
	}
	for _, tc := range []struct {
		name   string
		phase  v1alpha1.RolloutPhase
		reason string
		fails  bool
	}{
		{"up", v1alpha1.PhaseCompleted, "", false},
		{"halts", v1alpha1.PhaseHalted, "node " + node + ": resets 40x the baseline", true},
	} {
		w := exec.Command(bin, kc, "status", tc.name, "-w")
		var wo, we bytes.Buffer
		w.Stdout, w.Stderr = &wo, &we
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- w.Wait() }()
		setPhase(t, rc, tc.name, v1alpha1.PhaseProgressing, "", node, v1alpha1.NodeSoak)
		time.Sleep(1500 * time.Millisecond) // one refresh shows Progressing: the watch must not end there
		select {
		case err := <-done:
			t.Fatalf("status -w %s ended on Progressing: %v %s", tc.name, err, we.String())
		default:
		}
		state := v1alpha1.NodeDone
		if tc.fails {
			state = v1alpha1.NodeFailed
		}
		setPhase(t, rc, tc.name, tc.phase, tc.reason, node, state)
		var werr error
		select {
		case werr = <-done:
		case <-time.After(time.Minute):
			_ = w.Process.Kill()
			t.Fatalf("status -w %s did not end on %s", tc.name, tc.phase)
		}
		var exit *exec.ExitError
		switch {
		case !tc.fails && werr != nil:
			t.Errorf("status -w on Completed: %v %s; want exit 0", werr, we.String())
		case tc.fails && (!errors.As(werr, &exit) || exit.ExitCode() != exitHalted || !strings.Contains(we.String(), tc.reason)):
			t.Errorf("status -w on Halted: %v, stderr %q; want exit %d with the reason", werr, we.String(), exitHalted)
		}
		if strings.Contains(wo.String(), "\033[") || !strings.Contains(wo.String(), string(tc.phase)) || !strings.Contains(wo.String(), "Progressing") {
			t.Errorf("status -w %s into a pipe:\n%q", tc.name, wo.String())
		}
	}
	// Without -w, a halted rollout exits 2 too; a completed one 0.
	stdoutAndFailure := func(wantOut, wantErr string, args ...string) {
		t.Helper()
		out, errOut, err := cli("", args...)
		oneLineFailure(t, strings.Join(args, " "), "", errOut, err, wantErr)
		if out != wantOut {
			t.Errorf("%s: stdout %q, want %q", strings.Join(args, " "), out, wantOut)
		}
	}
	stdoutAndFailure("noderollout.nodewise.io/halts\n", "NodeRollout halts is Halted: node "+node, "status", "halts", "-o", "name")
	if _, errOut, err := cli("", "status", "up"); err != nil {
		t.Errorf("status of a completed rollout: %v %s", err, errOut)
	}
	// --timeout ends a watch that would not end.
	if _, errOut, err := cli(strings.Replace(good, "name: up", "name: slow", 1), "apply", "-f", "-"); err != nil {
		t.Fatal(errOut)
	}
	setPhase(t, rc, "slow", v1alpha1.PhaseProgressing, "", node, v1alpha1.NodeSoak)
	stdoutAndFailure("noderollout.nodewise.io/slow\n", "timed out after 2s waiting for NodeRollout slow", "status", "slow", "-w", "--timeout", "2s", "-o", "name")

	// Dynamic completion: rollout names, then the rollout's nodes.
	if out, _, err := cli("", "__complete", "status", ""); err != nil || !strings.Contains(out, "halts\n") || !strings.Contains(out, "up\n") || !strings.Contains(out, "slow\n") {
		t.Errorf("completing status NAME: %v\n%s", err, out)
	}
	if out, _, err := cli("", "__complete", "pause", "h"); err != nil || !strings.HasPrefix(out, "halts\n:") {
		t.Errorf("completing pause h: %v\n%s", err, out)
	}
	if out, _, err := cli("", "__complete", "explain", "up", "--node", ""); err != nil || !strings.HasPrefix(out, node+"\n:") {
		t.Errorf("completing explain up --node: %v\n%s", err, out)
	}

	// list / get.
	if out, errOut, err := cli("", "list"); err != nil || !strings.Contains(out, "NAME") || !strings.Contains(out, "halts") || !strings.Contains(out, string(v1alpha1.PhaseHalted)) {
		t.Errorf("list: %v %q %s", err, out, errOut)
	}
	if out, errOut, err := cli("", "list", "-o", "name"); err != nil || !strings.Contains(out, "noderollout.nodewise.io/up\n") || !strings.Contains(out, "noderollout.nodewise.io/halts\n") {
		t.Errorf("list -o name: %v %q %s", err, out, errOut)
	}
	if out, errOut, err := cli("", "get", "up", "-o", "jsonpath={.status.phase}"); err != nil || out != string(v1alpha1.PhaseCompleted) {
		t.Errorf("get up -o jsonpath: %v %q %s", err, out, errOut)
	}
	if out, _, err := cli("", "get", "nope"); err == nil {
		t.Errorf("get of a missing rollout succeeded: %q", out)
	}

	// -o on the commands that change a rollout or explain a node.
	if out, errOut, err := cli("", "explain", "up", "--node", node, "-o", "jsonpath={.name} {.state}"); err != nil || out != node+" "+string(v1alpha1.NodeDone) {
		t.Errorf("explain -o jsonpath: %v %q %s", err, out, errOut)
	}
	if out, errOut, err := cli("", "pause", "up", "-o", "jsonpath={.spec.paused}"); err != nil || out != "true" {
		t.Errorf("pause -o jsonpath: %v %q %s", err, out, errOut)
	}
	if out, errOut, err := cli("", "resume", "up", "-o", "yaml"); err != nil || !strings.Contains(out, "kind: NodeRollout") || !strings.Contains(out, "nodewise.io/resume-token") || strings.Contains(out, "paused: true") {
		t.Errorf("resume -o yaml: %v %q %s", err, out, errOut)
	}

	// version: the client, Kubernetes, and nodewise's workloads in -n.
	if out, _, err := cli("", "version"); err != nil || !strings.Contains(out, "Client: nodewise ") || !strings.Contains(out, "Kubernetes: v") || !strings.Contains(out, "nodewise is not installed in namespace nodewise-system") {
		t.Errorf("version without nodewise installed: %v\n%q", err, out)
	}
	installFakeOrchestrator(t, c, "nodewise-system", "v9.9.9")
	if out, _, err := cli("", "version"); err != nil || !strings.Contains(out, "Server: nodewise-orchestrator v9.9.9 (deployment nodewise-system/") || strings.Contains(out, "Running:") {
		t.Errorf("version: %v\n%s", err, out)
	}
	// What runs is what the leaders write on their Leases, whatever the
	// Deployment's image says; a released Lease (no holder) runs nothing.
	holder, none := "orch-0", ""
	for name, h := range map[string]*string{"nodewise-orchestrator": &holder, "nodewise-notify": &none} {
		lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "nodewise-system",
			Annotations: map[string]string{leader.VersionAnnotation: "v9.9.10-" + name}}, Spec: coordinationv1.LeaseSpec{HolderIdentity: h}}
		if _, err := c.Client.CoordinationV1().Leases("nodewise-system").Create(context.Background(), lease, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if out, _, err := cli("", "version"); err != nil || !strings.Contains(out, "Running: orch-0 v9.9.10-nodewise-orchestrator (leader of Lease nodewise-system/nodewise-orchestrator)") || strings.Contains(out, "nodewise-notify") {
		t.Errorf("version with a leader: %v\n%s", err, out)
	}
}

// setPhase writes the status an orchestrator would.
func setPhase(t *testing.T, rc v1alpha1.NodeRolloutInterface, name string, phase v1alpha1.RolloutPhase, reason, node string, state v1alpha1.NodeState) {
	t.Helper()
	ctx := context.Background()
	nr, err := rc.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nr.Status.Phase, nr.Status.HaltReason, nr.Status.ObservedGeneration = phase, reason, nr.Generation
	nr.Status.Nodes = []v1alpha1.NodeStatus{{Name: node, State: state}}
	nr.Status.Counts = v1alpha1.RolloutCounts{Total: 1}
	if state == v1alpha1.NodeDone {
		nr.Status.Counts.Done = 1
	}
	if _, err := rc.UpdateStatus(ctx, nr, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("writing %s's status: %v", name, err)
	}
}

// installFakeOrchestrator creates a Deployment labelled as deploy/ labels the
// orchestrator's (no pod needs to run for `version` to read it).
func installFakeOrchestrator(t *testing.T, c *cluster.Cluster, ns, version string) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app.kubernetes.io/name": "nodewise-orchestrator", "app.kubernetes.io/part-of": "nodewise"}
	zero := int32(0)
	d := &appsv1.Deployment{
		// The chart's version label says its appVersion; the image (an
		// image.tag override) says what runs, and version reports that.
		ObjectMeta: metav1.ObjectMeta{Name: "nodewise-orchestrator", Namespace: ns, Labels: map[string]string{"app.kubernetes.io/name": "nodewise-orchestrator", "app.kubernetes.io/part-of": "nodewise", "app.kubernetes.io/version": "v0.1.0"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: &zero,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "orchestrator", Image: "ghcr.io/nodewise/orchestrator:" + version}}},
			},
		},
	}
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
