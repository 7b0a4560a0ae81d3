package main

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseControllers(t *testing.T) {
	for in, want := range map[string]map[string]bool{
		"noderollout":            {"noderollout": true},
		"revisions":              {"revisions": true},
		"noderollout, revisions": {"noderollout": true, "revisions": true},
	} {
		got, err := parseControllers(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("parseControllers(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "rollouts", "noderollout,"} {
		if _, err := parseControllers(bad); err == nil || !strings.Contains(err.Error(), "unknown controller") {
			t.Errorf("parseControllers(%q) = %v; want an unknown-controller error", bad, err)
		}
	}
}

func TestRunRejectsABadSkewOverride(t *testing.T) {
	err := run(t.Context(), runConfig{controllers: "noderollout", kubeconfig: "/nonexistent", skewMaxBehind: []string{"ztunnel=-1"}})
	if err == nil || !strings.Contains(err.Error(), "--skew-max-behind") || !strings.Contains(err.Error(), "whole number") {
		t.Errorf("run with --skew-max-behind ztunnel=-1: %v; want the flag named and why", err)
	}
}
