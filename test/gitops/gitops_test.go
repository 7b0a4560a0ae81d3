package gitops

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/deploy/argocd"
	"github.com/nodewise/nodewise/test/testkit"
)

// phases are the values the CRD of kind allows in status.phase.
func phases(t *testing.T, file string) []string {
	t.Helper()
	data, err := os.ReadFile(testkit.CRD(file))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(data, &crd); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, v := range crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["status"].Properties["phase"].Enum {
		var s string
		if err := json.Unmarshal(v.Raw, &s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if len(out) < 5 {
		t.Fatalf("%s: status.phase allows only %v", file, out)
	}
	return out
}

// object is a nodewise object of kind in phase as its controller writes it:
// its generation observed, the phase's reason, and the conditions of its
// progress (a round trip through JSON, as a client reads it).
func object(t *testing.T, kind, phase string, progress v1alpha1.Progress) map[string]any {
	t.Helper()
	var st any
	reason := "why it is " + phase
	switch kind {
	case "NodeRollout":
		s := v1alpha1.NodeRolloutStatus{Phase: v1alpha1.RolloutPhase(phase), ObservedGeneration: 2, Counts: v1alpha1.RolloutCounts{Total: 6, Done: 2}}
		if phase == string(v1alpha1.PhaseHalted) {
			s.HaltReason = reason
		}
		v1alpha1.SetProgress(&s.Conditions, progress, phase, reason, 2, metav1.Now())
		st = s
	case "RevisionMigration":
		s := v1alpha1.RevisionMigrationStatus{Phase: v1alpha1.MigrationPhase(phase), ObservedGeneration: 2, Reason: reason}
		v1alpha1.SetProgress(&s.Conditions, progress, phase, reason, 2, metav1.Now())
		st = s
	}
	data, err := json.Marshal(map[string]any{"apiVersion": "nodewise.io/v1alpha1", "kind": kind, "metadata": map[string]any{"name": "x", "generation": 2}, "status": st})
	if err != nil {
		t.Fatal(err)
	}
	var u unstructured.Unstructured
	if err := u.UnmarshalJSON(data); err != nil { // numbers as int64, as the dynamic client decodes them
		t.Fatal(err)
	}
	return u.Object
}

// TestEveryPhaseReadsAlike: for every phase each CRD allows, Argo CD's
// health check and kstatus read the object alike and as the phase's
// Progress says: Ready is Healthy and Current, Stalled Degraded and Failed,
// Reconciling Progressing (Suspended when Paused) and InProgress; the
// message says the phase and why.
func TestEveryPhaseReadsAlike(t *testing.T) {
	argo := map[v1alpha1.Progress]string{v1alpha1.ProgressReady: "Healthy", v1alpha1.ProgressStalled: "Degraded", v1alpha1.ProgressReconciling: "Progressing"}
	flux := map[v1alpha1.Progress]status.Status{v1alpha1.ProgressReady: status.CurrentStatus, v1alpha1.ProgressStalled: status.FailedStatus, v1alpha1.ProgressReconciling: status.InProgressStatus}
	for _, kind := range argocd.Kinds {
		script, err := argocd.HealthScript(kind)
		if err != nil {
			t.Fatal(err)
		}
		file := map[string]string{"NodeRollout": testkit.NodeRolloutsCRD, "RevisionMigration": testkit.RevisionMigrationsCRD}[kind]
		for _, phase := range phases(t, file) {
			progress := v1alpha1.RolloutPhase(phase).Progress()
			if kind == "RevisionMigration" {
				progress = v1alpha1.MigrationPhase(phase).Progress()
			}
			obj := object(t, kind, phase, progress)
			want := argo[progress]
			if phase == "Paused" {
				want = "Suspended"
			}
			h, err := ArgoHealth(script, obj)
			if err != nil || h.Status != want {
				t.Errorf("%s %s: Argo CD health %+v (%v), want %s", kind, phase, h, err, want)
			}
			if !strings.Contains(h.Message, "why it is "+phase) {
				t.Errorf("%s %s: Argo CD message %q does not say why", kind, phase, h.Message)
			}
			if kind == "NodeRollout" && !strings.HasSuffix(h.Message, "(2/6 nodes done)") {
				t.Errorf("%s %s: Argo CD message %q does not count the nodes done", kind, phase, h.Message)
			}
			got, msg, err := Kstatus(obj)
			if err != nil || got != flux[progress] || msg != "why it is "+phase && progress != v1alpha1.ProgressReady {
				t.Errorf("%s %s: kstatus %s %q (%v), want %s with the reason", kind, phase, got, msg, err, flux[progress])
			}
		}
	}
}

// TestSpecNotObservedIsProgressing: an object whose spec its controller has
// not observed is Progressing and InProgress whatever its phase says: no
// status yet (Argo CD only; kstatus needs the CRD's default, tested against
// the API server in test/e2e), the CRD's default observedGeneration 0, or a
// generation behind.
func TestSpecNotObservedIsProgressing(t *testing.T) {
	for _, kind := range argocd.Kinds {
		script, err := argocd.HealthScript(kind)
		if err != nil {
			t.Fatal(err)
		}
		done := object(t, kind, map[string]string{"NodeRollout": "Completed", "RevisionMigration": "Succeeded"}[kind], v1alpha1.ProgressReady)
		if h, err := ArgoHealth(script, done); err != nil || h.Status != "Healthy" {
			t.Fatalf("%s: the finished object reads %+v (%v), want Healthy", kind, h, err)
		}
		noStatus := map[string]any{"apiVersion": done["apiVersion"], "kind": kind, "metadata": done["metadata"]}
		if h, err := ArgoHealth(script, noStatus); err != nil || h.Status != "Progressing" {
			t.Errorf("%s without status: Argo CD %+v (%v), want Progressing", kind, h, err)
		}
		for _, observed := range []int64{0, 1} {
			done["status"].(map[string]any)["observedGeneration"] = observed
			if h, err := ArgoHealth(script, done); err != nil || h.Status != "Progressing" || !strings.Contains(h.Message, "observe") {
				t.Errorf("%s observedGeneration %d of 2: Argo CD %+v (%v), want Progressing, waiting to be observed", kind, observed, h, err)
			}
			if got, msg, err := Kstatus(done); err != nil || got != status.InProgressStatus {
				t.Errorf("%s observedGeneration %d of 2: kstatus %s %q (%v), want InProgress", kind, observed, got, msg, err)
			}
		}
	}
}

// TestUnknownPhaseIsUnknown: a phase newer than the script is Unknown, not
// taken for healthy or progressing.
func TestUnknownPhaseIsUnknown(t *testing.T) {
	for _, kind := range argocd.Kinds {
		script, err := argocd.HealthScript(kind)
		if err != nil {
			t.Fatal(err)
		}
		if h, err := ArgoHealth(script, object(t, kind, "Teleporting", v1alpha1.ProgressReconciling)); err != nil || h.Status != "Unknown" || !strings.Contains(h.Message, "Teleporting") {
			t.Errorf("%s in an unknown phase: %+v (%v), want Unknown naming the phase", kind, h, err)
		}
	}
}

// TestArgoHealthOpensArgoCDsLibrariesOnly: the harness is as strict as Argo
// CD: a script using the string library fails, as it would there.
func TestArgoHealthOpensArgoCDsLibrariesOnly(t *testing.T) {
	if _, err := ArgoHealth(`return {status = string.upper("healthy")}`, map[string]any{}); err == nil {
		t.Error("a script using the string library ran; Argo CD does not open it")
	}
	if h, err := ArgoHealth(`local t = {} table.insert(t, "Healthy") return {status = t[1]}`, map[string]any{}); err != nil || h.Status != "Healthy" {
		t.Errorf("a script using the table library: %+v %v", h, err)
	}
	if _, err := ArgoHealth(`return {status = "Fine"}`, map[string]any{}); err == nil {
		t.Error("a status Argo CD does not know was accepted")
	}
}
