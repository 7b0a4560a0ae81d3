package model

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

func TestNewPolicyRejects(t *testing.T) {
	cases := []struct {
		name string
		spec v1alpha1.NodeRolloutSpec
		want string
	}{
		{"negative maxParallel", v1alpha1.NodeRolloutSpec{MaxParallel: intstr.FromInt32(-1)}, "spec.maxParallel"},
		{"window end equal to start", v1alpha1.NodeRolloutSpec{MaintenanceWindows: []v1alpha1.MaintenanceWindow{{Start: "10:00", End: "10:00"}}}, "must differ from its start"},
		{"unknown time zone", v1alpha1.NodeRolloutSpec{MaintenanceWindows: []v1alpha1.MaintenanceWindow{{Start: "10:00", End: "11:00", TimeZone: "Mars/Olympus"}}}, "unknown time zone"},
		{"bad clock", v1alpha1.NodeRolloutSpec{MaintenanceWindows: []v1alpha1.MaintenanceWindow{{Start: "25:00", End: "26:00"}}}, "not HH:MM"},
		{"drain policy", v1alpha1.NodeRolloutSpec{Drain: v1alpha1.DrainSpec{Policy: "sometimes"}}, "spec.drain.policy"},
		{"zero longLivedAfter", v1alpha1.NodeRolloutSpec{Drain: v1alpha1.DrainSpec{LongLivedAfter: &v1alpha1.Duration{}}}, "spec.drain.longLivedAfter"},
		{"zero drain timeout (forever to the drain library)", v1alpha1.NodeRolloutSpec{Drain: v1alpha1.DrainSpec{Timeout: &v1alpha1.Duration{}}}, "spec.drain.timeout: must be positive"},
		{"soak not a duration", specJSON(t, `{"soak":"10 minutes"}`), `spec.soak: "10 minutes" is not a duration`},
		{"gate interval not a duration", specJSON(t, `{"gates":{"interval":"banana"}}`), `spec.gates.interval: "banana"`},
		{"unknown control group policy", v1alpha1.NodeRolloutSpec{Gates: v1alpha1.GatesSpec{ControlGroup: "Off"}}, `spec.gates.controlGroup: "Off" is not one of Enabled, Disabled`},
		{"unknown kuredLock", v1alpha1.NodeRolloutSpec{Coordination: v1alpha1.CoordinationSpec{KuredLock: "ignore"}}, `spec.coordination.kuredLock: "ignore" is not take or honour`},
		{"duplicate target", v1alpha1.NodeRolloutSpec{Targets: []v1alpha1.TargetRef{{Namespace: "a", Name: "b"}, {Namespace: "a", Name: "b"}}}, "listed twice"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewPolicy(tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want mention of %q", err, tc.want)
			}
		})
	}
	if err := ValidateRaw(map[string]any{"spec": map[string]any{"maxParallel": float64(0)}}); err == nil {
		t.Fatal("explicit maxParallel 0 accepted")
	}
}

// specJSON decodes a spec the way the informer does, so tests can hold values
// the CRD would refuse (an object written under an older CRD).
func specJSON(t *testing.T, raw string) v1alpha1.NodeRolloutSpec {
	t.Helper()
	var s v1alpha1.NodeRolloutSpec
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		t.Fatalf("decoding %s: %v", raw, err)
	}
	return s
}

func TestNewPolicyDefaults(t *testing.T) {
	p, err := NewPolicy(v1alpha1.NodeRolloutSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Targets) != 2 || p.Targets[0].Name != "istio-cni-node" || p.Targets[1].Name != "ztunnel" {
		t.Fatalf("targets %v: want CNI then ztunnel", p.Targets)
	}
	if p.MaxParallel != Nodes(1) || p.MaxUnavailable != Nodes(1) || p.Drain != v1alpha1.DrainNever || p.PDBBlocked != v1alpha1.PDBHalt || p.SwapTimeout != DefaultSwapTimeout || p.EnrollmentTimeout != 30*time.Second || !p.TakeKuredLock {
		t.Fatalf("defaults %+v", p)
	}
}

// TestNewPolicyRejectsANonPositiveEnrollmentTimeout: the watchdog's bound
// must be positive; the error names the field.
func TestNewPolicyRejectsANonPositiveEnrollmentTimeout(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		_, err := NewPolicy(v1alpha1.NodeRolloutSpec{EnrollmentTimeout: &v1alpha1.Duration{Duration: d}})
		if err == nil || !strings.Contains(err.Error(), "spec.enrollmentTimeout: "+d.String()+" must be positive") {
			t.Errorf("enrollmentTimeout %s: error %v, want one naming spec.enrollmentTimeout", d, err)
		}
	}
	p, err := NewPolicy(v1alpha1.NodeRolloutSpec{EnrollmentTimeout: &v1alpha1.Duration{Duration: 5 * time.Second}})
	if err != nil || p.EnrollmentTimeout != 5*time.Second {
		t.Fatalf("enrollmentTimeout 5s: %s, %v", p.EnrollmentTimeout, err)
	}
}
