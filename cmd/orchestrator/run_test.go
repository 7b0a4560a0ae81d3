package main

import (
	"errors"
	"flag"
	"io"
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

// --help describes every flag and leaves out the test hooks.
func TestHelpDescribesFlagsAndHidesTestHooks(t *testing.T) {
	var out strings.Builder
	_, err := parseFlags([]string{"--help"}, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v, want flag.ErrHelp", err)
	}
	help := out.String()
	for _, f := range []string{"controllers", "kubeconfig", "namespace", "agent-ca", "agent-token-file", "metrics-addr", "skew-max-behind", "version"} {
		if !strings.Contains(help, "  -"+f+" ") && !strings.Contains(help, "  -"+f+"\n") {
			t.Errorf("--help lacks -%s:\n%s", f, help)
		}
	}
	if strings.Contains(help, "test-hold-after-persist") {
		t.Errorf("--help shows the test hook:\n%s", help)
	}
	// The hidden flag still works.
	rc, err := parseFlags([]string{"--test-hold-after-persist=Cordoned"}, io.Discard)
	if err != nil || rc.orchestrator.HoldAfterPersist != "Cordoned" {
		t.Errorf("--test-hold-after-persist: %v %q", err, rc.orchestrator.HoldAfterPersist)
	}
}

func TestParseFlagsRejectsBadInputInOneLine(t *testing.T) {
	for _, args := range [][]string{{"--bogus"}, {"--lease-duration=soon"}, {"stray"}} {
		_, err := parseFlags(args, io.Discard)
		if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "orchestrator --help") {
			t.Errorf("parseFlags(%q) = %v; want one line pointing at --help", args, err)
		}
	}
}
