package locks

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestConditionHolder(t *testing.T) {
	node := func(cs ...corev1.NodeCondition) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Conditions: append([]corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}, cs...)}}
	}
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: msg}
	}
	for _, tc := range []struct {
		name string
		n    *corev1.Node
		want []string // substrings; none: not held
	}{
		{"none", node(), nil},
		{"another writer's maintenance", node(cond(corev1.NodeMaintenanceInProgress, corev1.ConditionTrue, "FirmwareUpdate", "BIOS 2.1\nreboot at 10:00")),
			[]string{"another tool", "MaintenanceInProgress=True", "reason FirmwareUpdate", "BIOS 2.1 reboot at 10:00"}},
		{"another writer's drain", node(cond(corev1.NodeDrainInProgress, corev1.ConditionTrue, "", "")), []string{"DrainInProgress=True"}},
		{"finished (False)", node(cond(corev1.NodeMaintenanceInProgress, corev1.ConditionFalse, "Done", "")), nil},
		{"unknown", node(cond(corev1.NodeDrainInProgress, corev1.ConditionUnknown, "Lost", "")), nil},
		{"nodewise's own", node(cond(corev1.NodeMaintenanceInProgress, corev1.ConditionTrue, ReasonInFlight, "nodewise NodeRollout r"),
			cond(corev1.NodeDrainInProgress, corev1.ConditionTrue, ReasonDraining, "")), nil},
		{"nodewise's halted", node(cond(corev1.NodeMaintenanceInProgress, corev1.ConditionTrue, ReasonHalted, "")), nil},
		{"another type", node(cond("MaintenancePlanned", corev1.ConditionTrue, "Tomorrow", "")), nil},
	} {
		got := ConditionHolder(tc.n)
		if len(tc.want) == 0 && got != "" {
			t.Errorf("%s: held %q, want not held", tc.name, got)
		}
		if len(tc.want) > 0 && got == "" {
			t.Errorf("%s: not held, want held", tc.name)
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: %q, want it to say %q", tc.name, got, w)
			}
		}
	}
}
