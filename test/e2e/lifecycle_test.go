package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/testkit"
)

func (e *env) cli(args ...string) (string, error) {
	var out, errOut bytes.Buffer
	cmd := exec.Command(testkit.Binary(e.t, "nodewise"), append([]string{"--kubeconfig", e.c.Kubeconfig}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	return out.String() + errOut.String(), err
}

// TestRollbackAbortAndStatus: a completed rollout is swapped back in reverse
// order once the old template is restored; a second rollout aborted mid-way
// leaves no cordon; `nodewise status` shows both.
func TestRollbackAbortAndStatus(t *testing.T) {
	t.Parallel()
	const nodes = 6
	e := newEnv(t, nodes, 2)
	e.runInProcess("solo")
	e.upgrade("1.28.1")
	if out, err := e.cli("apply", "-f", writeRollout(t, "up", `maxParallel: 2
  maxUnavailable: 2
  baseline: 0s
  soak: 0s`)); err != nil {
		t.Fatalf("apply: %v %s", err, out)
	}
	e.waitPhase("up", 3*time.Minute, v1alpha1.PhaseCompleted)
	out, err := e.cli("status", "up")
	if err != nil || !strings.Contains(out, "phase Completed") || !strings.Contains(out, "[##############################] 6/6") {
		t.Fatalf("status: %v\n%s", err, out)
	}

	// Rollback: restore the old template, then ask.
	if out, err := e.cli("rollback", "up"); err != nil {
		t.Fatalf("rollback: %v %s", err, out)
	}
	nr := e.waitPhase("up", time.Minute, v1alpha1.PhaseRollingBack)
	if c := conditionMessage(nr, "Valid"); nr.Status.Counts.RolledBack != 0 {
		t.Fatalf("rolled back before the old template was restored (%s)", c)
	}
	w := e.watch()
	if err := cluster.InstallIstio(context.Background(), e.c.Client, cluster.IstioOptions{Version: "1.27.3", UpdateStrategy: appsv1.OnDeleteDaemonSetStrategyType, SkipSamples: true}); err != nil {
		t.Fatal(err)
	}
	nr = e.waitPhase("up", 3*time.Minute, v1alpha1.PhaseRolledBack, v1alpha1.PhaseHalted)
	if nr.Status.Phase != v1alpha1.PhaseRolledBack || nr.Status.Counts.RolledBack != nodes {
		t.Fatalf("phase %s counts %+v", nr.Status.Phase, nr.Status.Counts)
	}
	e.assertAllOnNewest(nodes)
	e.requireNoSurgeLeftovers() // ztunnel is swapped back surge: a fresh old-version bridge each node
	order := w.swapOrder()
	sortByWave(nr.Status.Nodes)
	last := nr.Status.Nodes[len(nr.Status.Nodes)-2:] // the rollback runs two at a time, last planned first
	if len(order) != nodes || (order[0] != last[0].Name && order[0] != last[1].Name) {
		t.Errorf("rollback order %v: want one of the last planned nodes (%s, %s) first", order, last[0].Name, last[1].Name)
	}

	// Abort a second rollout mid-way.
	e.upgrade("1.28.2")
	e.apply(rollout("aborted", func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
		s.Soak = &v1alpha1.Duration{Duration: 3 * time.Second}
	}))
	e.waitStep("aborted", v1alpha1.NodeSoak)
	if out, err := e.cli("abort", "aborted"); err != nil {
		t.Fatalf("abort: %v %s", err, out)
	}
	nr = e.waitPhase("aborted", 2*time.Minute, v1alpha1.PhaseAborted)
	if uns := e.unschedulable(); len(uns) != 0 {
		t.Errorf("cordons left after abort: %v", uns)
	}
	e.requireNoSurgeLeftovers()
	if nr.Status.Counts.Done+nr.Status.Counts.Pending != nodes || nr.Status.Counts.InProgress != 0 {
		t.Errorf("after abort: counts %+v", nr.Status.Counts)
	}
	// An Aborted rollout exits 1; stdout holds the object (as kubectl -o json), stderr says why.
	out, err = e.cli("status", "aborted", "-o", "json")
	obj, why, _ := strings.Cut(out, "nodewise: ")
	if err == nil || !strings.Contains(why, "is Aborted") {
		t.Errorf("status -o json of an aborted rollout: exit %v, stderr %q; want exit 1 saying it is Aborted", err, why)
	}
	var got v1alpha1.NodeRollout
	if err := json.Unmarshal([]byte(obj), &got); err != nil || got.Status.Phase != v1alpha1.PhaseAborted || got.Kind != "NodeRollout" {
		t.Errorf("status -o json: %v kind %q phase %q\n%s", err, got.Kind, got.Status.Phase, out)
	}
}

func conditionMessage(nr *v1alpha1.NodeRollout, typ string) string {
	for _, c := range nr.Status.Conditions {
		if c.Type == typ {
			return c.Message
		}
	}
	return ""
}

func sortByWave(ns []v1alpha1.NodeStatus) {
	for i := 1; i < len(ns); i++ {
		for j := i; j > 0 && (ns[j].Wave < ns[j-1].Wave || (ns[j].Wave == ns[j-1].Wave && ns[j].Name < ns[j-1].Name)); j-- {
			ns[j], ns[j-1] = ns[j-1], ns[j]
		}
	}
}

func writeRollout(t *testing.T, name, specBody string) string {
	t.Helper()
	path := t.TempDir() + "/" + name + ".yaml"
	body := "apiVersion: nodewise.io/v1alpha1\nkind: NodeRollout\nmetadata:\n  name: " + name + "\nspec:\n  " + specBody + "\n"
	if err := writeFile(path, body); err != nil {
		t.Fatal(err)
	}
	return path
}
