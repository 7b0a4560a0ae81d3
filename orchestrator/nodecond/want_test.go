package nodecond

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/locks"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
)

func TestFromRecord(t *testing.T) {
	live := func(name string, uid types.UID) bool { return name == "r" && uid == "u" }
	rec := func(step v1alpha1.NodeState, cordonedBy string) nodestep.Record {
		return nodestep.Record{Rollout: "r", RolloutUID: "u", Step: step, CordonedBy: cordonedBy}
	}
	for _, tc := range []struct {
		name          string
		rec           nodestep.Record
		unschedulable bool
		maint         string // the reason wanted; "": none
		drainAsIs     bool
	}{
		{"no record", nodestep.Record{}, false, "", false},
		{"preflight (the slot taken)", rec(v1alpha1.NodePreflight, ""), false, locks.ReasonInFlight, false},
		{"cordoned", rec(v1alpha1.NodeCordon, "r"), true, locks.ReasonInFlight, false},
		{"draining: the drain sets its own", rec(v1alpha1.NodeDrain, "r"), true, locks.ReasonInFlight, true},
		{"soaking, uncordoned", rec(v1alpha1.NodeSoak, ""), false, locks.ReasonInFlight, false},
		{"abort cleanup", rec(v1alpha1.NodeAbortCleanup, "r"), true, locks.ReasonInFlight, false},
		{"done", rec(v1alpha1.NodeDone, ""), false, "", false},
		{"skipped", rec(v1alpha1.NodeSkipped, ""), false, "", false},
		{"pending again (aborted, retried)", rec(v1alpha1.NodePending, ""), false, "", false},
		{"halted, left cordoned", rec(v1alpha1.NodeFailed, "r"), true, locks.ReasonHalted, false},
		{"halted, handed back", rec(v1alpha1.NodeFailed, ""), false, "", false},
		{"halted, a person uncordoned it", rec(v1alpha1.NodeFailed, "r"), false, "", false},
		{"in flight under a rollout that is gone", nodestep.Record{Rollout: "r", RolloutUID: "old", Step: v1alpha1.NodeDrain}, true, "", false},
	} {
		w := FromRecord(tc.rec, tc.unschedulable, live)
		got := ""
		if w.Maintenance != nil {
			got = w.Maintenance.Reason
			if !strings.Contains(w.Maintenance.Message, "NodeRollout r ") {
				t.Errorf("%s: message %q does not name the rollout", tc.name, w.Maintenance.Message)
			}
		}
		if got != tc.maint || w.DrainAsIs != tc.drainAsIs || w.Drain != nil {
			t.Errorf("%s: maintenance %q, drain %v as is %v; want %q, nil, as is %v", tc.name, got, w.Drain, w.DrainAsIs, tc.maint, tc.drainAsIs)
		}
	}
}

func TestDiff(t *testing.T) {
	then := metav1.NewTime(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	kubelet := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}
	ours := func(t corev1.NodeConditionType, c *Cond) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: corev1.ConditionTrue, Reason: c.Reason, Message: c.Message, LastTransitionTime: then}
	}
	theirs := corev1.NodeCondition{Type: corev1.NodeMaintenanceInProgress, Status: corev1.ConditionTrue, Reason: "FirmwareUpdate", LastTransitionTime: then}
	types := func(cs []corev1.NodeCondition) (out []corev1.NodeConditionType) {
		for _, c := range cs {
			out = append(out, c.Type)
		}
		return out
	}
	for _, tc := range []struct {
		name        string
		have        []corev1.NodeCondition
		want        Want
		set, remove []corev1.NodeConditionType
	}{
		{"out: set maintenance", []corev1.NodeCondition{kubelet}, Want{Maintenance: InFlight("r"), DrainAsIs: true},
			[]corev1.NodeConditionType{corev1.NodeMaintenanceInProgress}, nil},
		{"out already", []corev1.NodeCondition{kubelet, ours(corev1.NodeMaintenanceInProgress, InFlight("r"))}, Want{Maintenance: InFlight("r")}, nil, nil},
		{"draining", []corev1.NodeCondition{ours(corev1.NodeMaintenanceInProgress, InFlight("r"))}, Want{Maintenance: InFlight("r"), Drain: Draining("r")},
			[]corev1.NodeConditionType{corev1.NodeDrainInProgress}, nil},
		{"drain as is keeps ours", []corev1.NodeCondition{ours(corev1.NodeMaintenanceInProgress, InFlight("r")), ours(corev1.NodeDrainInProgress, Draining("r"))},
			Want{Maintenance: InFlight("r"), DrainAsIs: true}, nil, nil},
		{"drain ended", []corev1.NodeCondition{ours(corev1.NodeMaintenanceInProgress, InFlight("r")), ours(corev1.NodeDrainInProgress, Draining("r"))},
			Want{Maintenance: InFlight("r")}, nil, []corev1.NodeConditionType{corev1.NodeDrainInProgress}},
		{"handed back", []corev1.NodeCondition{kubelet, ours(corev1.NodeMaintenanceInProgress, InFlight("r")), ours(corev1.NodeDrainInProgress, Draining("r"))},
			Want{}, nil, []corev1.NodeConditionType{corev1.NodeMaintenanceInProgress, corev1.NodeDrainInProgress}},
		{"halted: the message changes", []corev1.NodeCondition{ours(corev1.NodeMaintenanceInProgress, InFlight("r"))}, Want{Maintenance: Halted("r")},
			[]corev1.NodeConditionType{corev1.NodeMaintenanceInProgress}, nil},
		{"another writer's True is left alone", []corev1.NodeCondition{kubelet, theirs}, Want{Maintenance: InFlight("r")}, nil, nil},
		{"another writer's is never removed", []corev1.NodeCondition{kubelet, theirs}, Want{}, nil, nil},
		{"another writer's False is taken over", []corev1.NodeCondition{{Type: corev1.NodeMaintenanceInProgress, Status: corev1.ConditionFalse, Reason: "Done"}},
			Want{Maintenance: InFlight("r")}, []corev1.NodeConditionType{corev1.NodeMaintenanceInProgress}, nil},
		{"nothing of nodewise's, none wanted", []corev1.NodeCondition{kubelet}, Want{}, nil, nil},
	} {
		c := Diff(tc.have, tc.want, now)
		if !slices.Equal(types(c.Set), tc.set) || !slices.Equal(c.Remove, tc.remove) {
			t.Errorf("%s: set %v remove %v, want set %v remove %v", tc.name, types(c.Set), c.Remove, tc.set, tc.remove)
		}
		for _, s := range c.Set {
			if s.Status != corev1.ConditionTrue || !locks.Nodewise(s) || !s.LastHeartbeatTime.Time.Equal(now) {
				t.Errorf("%s: set %+v, want True, nodewise's reason, heartbeat now", tc.name, s)
			}
		}
	}
	// A condition already True keeps its transition time when its message changes.
	c := Diff([]corev1.NodeCondition{ours(corev1.NodeMaintenanceInProgress, InFlight("r"))}, Want{Maintenance: Halted("r")}, now)
	if len(c.Set) != 1 || !c.Set[0].LastTransitionTime.Equal(&then) {
		t.Errorf("halted over in flight: %+v, want the transition time kept at %s", c.Set, then)
	}
	c = Diff(nil, Want{Maintenance: InFlight("r")}, now)
	if len(c.Set) != 1 || !c.Set[0].LastTransitionTime.Time.Equal(now) {
		t.Errorf("newly out: %+v, want the transition time %s", c.Set, now)
	}
}

func TestPatchIsByConditionType(t *testing.T) {
	c := Change{Set: []corev1.NodeCondition{{Type: corev1.NodeMaintenanceInProgress, Status: corev1.ConditionTrue, Reason: locks.ReasonInFlight}},
		Remove: []corev1.NodeConditionType{corev1.NodeDrainInProgress}}
	data, err := c.Patch("42")
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Status struct {
			Conditions []map[string]any `json:"conditions"`
		} `json:"status"`
	}
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	if p.Metadata.ResourceVersion != "42" || len(p.Status.Conditions) != 2 ||
		p.Status.Conditions[0]["type"] != "MaintenanceInProgress" || p.Status.Conditions[0]["status"] != "True" ||
		p.Status.Conditions[1]["type"] != "DrainInProgress" || p.Status.Conditions[1]["$patch"] != "delete" {
		t.Errorf("patch %s: want conditional on 42, MaintenanceInProgress set, DrainInProgress deleted by type", data)
	}
}
