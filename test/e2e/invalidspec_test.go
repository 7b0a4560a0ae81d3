package e2e

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/testkit"
)

// TestInvalidSpecMidFlightMakesItsNodesSafe: a rollout whose spec turns
// invalid while a node is in flight (a time zone that does not exist,
// under a CRD that does not check it) and whose orchestrator is
// restarted still drives that node to a safe state: the stuck drain stops,
// the node is uncordoned and handed back Pending, no other node starts, and
// the Valid condition names the field. Abort then ends it, and deletion
// completes (the finalizer is released).
func TestInvalidSpecMidFlightMakesItsNodesSafe(t *testing.T) {
	t.Parallel()
	const nodes = 3
	e := newEnv(t, nodes, 1)
	held := e.c.Nodes[0].Name
	e.blockDrain(held) // the canary stays in Drain, cordoned, until made safe
	e.upgrade("1.28.1")
	first := e.startProcess("first", "127.0.0.1:0")
	e.apply(rollout("typo", func(s *v1alpha1.NodeRolloutSpec) {
		s.CanaryNodes = []string{held}
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
		s.Drain = v1alpha1.DrainSpec{Policy: v1alpha1.DrainAlways, PDBBlocked: v1alpha1.PDBWait, Timeout: &v1alpha1.Duration{Duration: 30 * time.Minute}}
		s.MaintenanceWindows = []v1alpha1.MaintenanceWindow{{Start: "00:00", End: "24:00", TimeZone: "Europe/Berlin"}}
	}))
	if n := e.waitStep("typo", v1alpha1.NodeDrain); n != held {
		t.Fatalf("node %s in Drain, want the canary %s", n, held)
	}
	first.kill()
	e.misspellTimeZone("typo")
	e.startProcess("second", "127.0.0.1:0")

	ctx := context.Background()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := e.c.Client.CoreV1().Nodes().Get(ctx, held, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = "unschedulable " + map[bool]string{true: "true", false: "false"}[n.Spec.Unschedulable] + ", step " + n.Annotations[model.AnnotationStep]
		return !n.Spec.Unschedulable && n.Annotations[model.AnnotationStep] == string(v1alpha1.NodePending), nil
	})
	if err != nil {
		t.Fatalf("the in-flight node %s was not made safe after the spec turned invalid: %s", held, last)
	}
	nr, err := e.rollouts.Get(ctx, "typo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if msg := conditionMessage(nr, "Valid"); nr.Status.Phase != v1alpha1.PhasePending || !strings.Contains(msg, "spec.maintenanceWindows[0]") || !strings.Contains(msg, "Europe/Berln") {
		t.Errorf("rollout %s, Valid condition %q: want Pending, naming spec.maintenanceWindows[0] and Europe/Berln", nr.Status.Phase, msg)
	}
	e.assertOnlyNodeStarted("typo", held)

	e.patch("typo", `{"spec":{"abort":true}}`)
	e.waitPhase("typo", time.Minute, v1alpha1.PhaseAborted)
	if err := e.rollouts.Delete(ctx, "typo", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := e.rollouts.Get(ctx, "typo", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatal("the invalid rollout was never deleted: its finalizer stayed")
	}
	if uns := e.unschedulable(); len(uns) != 0 {
		t.Errorf("cordons left: %v", uns)
	}
}

// TestAnotherRolloutWaitsForANodeMadeSafe: a rollout whose spec turns
// invalid while its node is in flight (cordoned, its drain held by a PDB)
// stops holding its other rollouts back, and the younger one that waited
// for it goes on, but does not take that node: it waits, saying so, while
// the node is in flight under the first; once the first, restarted, has
// made it safe, the second takes it and completes, and no cordon is left.
func TestAnotherRolloutWaitsForANodeMadeSafe(t *testing.T) {
	t.Parallel()
	const nodes = 3
	e := newEnv(t, nodes, 1)
	held := e.c.Nodes[0].Name
	e.blockDrain(held)
	e.upgrade("1.28.1")
	first := e.startProcess("first", "127.0.0.1:0")
	e.apply(rollout("holder", func(s *v1alpha1.NodeRolloutSpec) {
		s.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/hostname": held}}
		s.Drain = v1alpha1.DrainSpec{Policy: v1alpha1.DrainAlways, PDBBlocked: v1alpha1.PDBWait, Timeout: &v1alpha1.Duration{Duration: 30 * time.Minute}}
		s.MaintenanceWindows = []v1alpha1.MaintenanceWindow{{Start: "00:00", End: "24:00", TimeZone: "Europe/Berlin"}}
	}))
	e.waitStep("holder", v1alpha1.NodeDrain)
	e.apply(rollout("taker", nil))
	e.waitPhase("taker", time.Minute, v1alpha1.PhasePending) // it waits for holder
	e.misspellTimeZone("holder")
	ctx := context.Background()
	// The taker goes on, but the held node stays the holder's: the taker
	// says it waits for it (as for a node Kured holds, its wave waits too).
	var why string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := e.c.Client.CoreV1().Nodes().Get(ctx, held, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if r := n.Annotations[model.AnnotationRollout]; r != "holder" {
			t.Fatalf("node %s, in flight under holder, taken over by %s (step %s)", held, r, n.Annotations[model.AnnotationStep])
		}
		taker, err := e.rollouts.Get(ctx, "taker", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if ns := entry(taker, held); ns != nil {
			why = ns.Reason
		}
		return taker.Status.Phase == v1alpha1.PhaseProgressing && strings.Contains(why, "in flight (Drain) under NodeRollout holder"), nil
	})
	if err != nil {
		t.Fatalf("the taker does not say it waits for %s (its reason %q)", held, why)
	}
	first.kill()
	e.startProcess("second", "127.0.0.1:0")
	taker := e.waitPhase("taker", 3*time.Minute, v1alpha1.PhaseCompleted)
	if taker.Status.Counts.Done != nodes {
		t.Errorf("taker counts %+v, want all %d nodes Done", taker.Status.Counts, nodes)
	}
	e.assertAllOnNewest(nodes)
	if uns := e.unschedulable(); len(uns) != 0 {
		t.Errorf("cordons left: %v", uns)
	}
}

// assertOnlyNodeStarted: of every node, only the one named carries a
// record of the rollout.
func (e *env) assertOnlyNodeStarted(rollout, node string) {
	e.t.Helper()
	nl, err := e.c.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, n := range nl.Items {
		if n.Name != node && n.Annotations[model.AnnotationRollout] == rollout {
			e.t.Errorf("node %s started (step %q) while the spec was invalid", n.Name, n.Annotations[model.AnnotationStep])
		}
	}
}

// misspellTimeZone gives the rollout one maintenance window, always open,
// in a time zone that does not exist (Europe/Berln), under an older CRD
// that does not check zones.
func (e *env) misspellTimeZone(rollout string) {
	e.t.Helper()
	e.underAnOlderCRD(func(spec *apiextv1.JSONSchemaProps) {
		tz := spec.Properties["maintenanceWindows"].Items.Schema.Properties["timeZone"]
		tz.XValidations = nil // the older CRD: any zone of the right shape
		spec.Properties["maintenanceWindows"].Items.Schema.Properties["timeZone"] = tz
	}, func() error {
		_, err := e.rollouts.Patch(context.Background(), rollout, types.MergePatchType, []byte(`{"spec":{"maintenanceWindows":[{"start":"00:00","end":"24:00","timeZone":"Europe/Berln"}]}}`), metav1.PatchOptions{})
		return err
	})
}

// underAnOlderCRD writes (write, retried until it succeeds) once the CRD's
// spec schema is relaxed (relax), as an older CRD would be: the API server
// then takes what the current one refuses. It stays so: under the current
// CRD an object holding such a value could not be written at all, its
// status included.
func (e *env) underAnOlderCRD(relax func(spec *apiextv1.JSONSchemaProps), write func() error) {
	e.t.Helper()
	ax, err := apiextclient.NewForConfig(e.c.Config)
	if err != nil {
		e.t.Fatal(err)
	}
	crds := ax.ApiextensionsV1().CustomResourceDefinitions()
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		crd, err := crds.Get(ctx, "noderollouts.nodewise.io", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		spec := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"]
		relax(&spec)
		crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"] = spec
		_, err = crds.Update(ctx, crd, metav1.UpdateOptions{})
		return err == nil, nil
	})
	if err != nil {
		e.t.Fatalf("updating the CRD: %v", err)
	}
	// The relaxed schema reaches the API server's handlers shortly after
	// the update.
	var last error
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		last = write()
		return last == nil, nil
	}); err != nil {
		e.t.Fatalf("writing under the older CRD: %v", last)
	}
}

// TestAbortSurvivesANullSpec: once spec.abort is true, removing the whole
// spec (a merge patch {"spec":null}, a JSON patch remove) is refused by the
// API server, as removing abort is: a rule on spec does not run when spec
// goes.
func TestAbortSurvivesANullSpec(t *testing.T) {
	t.Parallel()
	rolls := abortedRollout(t)
	for _, p := range []struct {
		kind  types.PatchType
		patch string
	}{
		{types.MergePatchType, `{"spec":null}`},
		{types.JSONPatchType, `[{"op":"remove","path":"/spec"}]`},
	} {
		if _, err := rolls.Patch(context.Background(), "aborted", p.kind, []byte(p.patch), metav1.PatchOptions{}); !apierrors.IsInvalid(err) {
			t.Errorf("patch %s on an aborted rollout: %v; want it refused (Invalid)", p.patch, err)
		}
	}
	assertStillAborted(t, rolls)
}

// abortedRollout starts an API server with the CRD and creates the
// NodeRollout "aborted", spec.abort set.
func abortedRollout(t *testing.T) v1alpha1.NodeRolloutInterface {
	t.Helper()
	c := cluster.Start(t, cluster.Options{Nodes: 1})
	cluster.InstallCRDs(t, c, testkit.CRD(testkit.NodeRolloutsCRD))
	nwc, err := v1alpha1.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	rolls := nwc.NodeRollouts()
	if _, err := rolls.Create(context.Background(), rollout("aborted", func(s *v1alpha1.NodeRolloutSpec) { s.Abort = true }), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return rolls
}

// assertStillAborted: the rollout "aborted" still has spec.abort.
func assertStillAborted(t *testing.T, rolls v1alpha1.NodeRolloutInterface) {
	t.Helper()
	got, err := rolls.Get(context.Background(), "aborted", metav1.GetOptions{})
	if err != nil || !got.Spec.Abort {
		t.Fatalf("after the refused patches: %v, abort %v; want it still aborted", err, got != nil && got.Spec.Abort)
	}
}

// TestEmptySelectionFails: a nodeSelector that matches no node (a typo in
// a label) is not a finished upgrade: the rollout ends Failed with a Valid
// condition saying the selector matches no node, and `nodewise status`
// exits non-zero with that reason.
func TestEmptySelectionFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, 1)
	e.runInProcess("solo")
	e.upgrade("1.28.1")
	e.apply(rollout("typo", func(s *v1alpha1.NodeRolloutSpec) {
		s.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "ingres"}}
	}))
	nr := e.waitPhase("typo", time.Minute, v1alpha1.PhaseFailed, v1alpha1.PhaseCompleted)
	msg := conditionMessage(nr, "Valid")
	if nr.Status.Phase != v1alpha1.PhaseFailed || !strings.Contains(msg, "matches no node") || !strings.Contains(msg, "pool=ingres") {
		t.Errorf("rollout %s, Valid condition %q: want Failed, saying pool=ingres matches no node", nr.Status.Phase, msg)
	}
	out, err := e.cli("status", "typo")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 || !strings.Contains(out, "matches no node") {
		t.Errorf("nodewise status typo: %v, output %q; want a non-zero exit saying the selector matches no node", err, out)
	}
}
