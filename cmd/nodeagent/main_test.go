package main

import (
	"bytes"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/nodewise/nodewise/nodeagent"
)

func TestRunRejectsBadInputWithOneLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "cert and key files are required"},
		{[]string{"-mode=turbo", "-tls-cert=a", "-tls-key=b", "-token-file=c"}, `mode "turbo": want one of auto, ebpf, proc`},
		{[]string{"-tls-cert=/nonexistent/tls.crt", "-tls-key=/nonexistent/tls.key", "-token-file=/nonexistent/token"}, "loading TLS certificate"},
		{[]string{"-bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"--mesh=on", "-tls-cert=a", "-tls-key=b", "-token-file=c"}, `mesh "on": want auto or off`},
		{[]string{"--kubeconfig=/nonexistent/kubeconfig", "-tls-cert=a", "-tls-key=b", "-token-file=c"}, "loading kubeconfig"},
	} {
		var out bytes.Buffer
		err := run(tc.args, &out)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") || out.Len() != 0 {
			t.Errorf("run(%q) = %v (stdout %q), want one line containing %q and nothing on stdout", tc.args, err, out.String(), tc.want)
		}
	}
}

// --help lists every flag with its description, on stdout, and succeeds.
func TestHelpDescribesEveryFlag(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"--help"}, &out); err != nil {
		t.Fatalf("--help: %v", err)
	}
	help := out.String()
	for _, flag := range []string{"node", "mode", "listen", "tls-cert", "tls-key", "token-file", "proc-root", "cgroup-root", "mesh", "kubeconfig", "version"} {
		if !strings.Contains(help, "  -"+flag+" ") && !strings.Contains(help, "  -"+flag+"\n") {
			t.Errorf("--help lacks -%s:\n%s", flag, help)
		}
	}
	if !strings.Contains(help, "counting mode: auto, ebpf or proc") || !strings.Contains(help, `(default "/proc")`) {
		t.Errorf("--help lacks descriptions or defaults:\n%s", help)
	}
}

func TestVersionFlag(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"--version"}, &out); err != nil || !strings.HasPrefix(out.String(), "nodeagent dev") {
		t.Errorf("--version: %v %q; want nodeagent and the version (dev without ldflags)", err, out.String())
	}
}

// The ztunnel DaemonSets default to Istio's chart's (ztunnel in
// istio-system); the flags name others, and an empty list is refused.
func TestZtunnelDaemonSetsFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want nodeagent.ZtunnelDaemonSets
		err  string
	}{
		{nil, nodeagent.ZtunnelDaemonSets{Namespace: "istio-system", DaemonSets: []string{"ztunnel"}}, ""},
		{[]string{"--istio-namespace=mesh", "--ztunnel-daemonsets=ztunnel, ztunnel-canary"}, nodeagent.ZtunnelDaemonSets{Namespace: "mesh", DaemonSets: []string{"ztunnel", "ztunnel-canary"}}, ""},
		{[]string{"--ztunnel-daemonsets=,"}, nodeagent.ZtunnelDaemonSets{}, "want at least one name"},
		{[]string{"--istio-namespace="}, nodeagent.ZtunnelDaemonSets{}, "want at least one name and a namespace"},
	} {
		f, err := parseFlags(tc.args, io.Discard)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want an error with %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(f.ztunnel, tc.want) {
			t.Errorf("%q: %+v (%v), want %+v", tc.args, f.ztunnel, err, tc.want)
		}
	}
}

// --pod-histograms=false leaves the per-pod histograms out of /metrics
// (the chart's agent.podHistograms); they are on by default.
func TestPodHistogramsFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		off  bool
	}{{nil, false}, {[]string{"--pod-histograms=false"}, true}, {[]string{"--pod-histograms"}, false}} {
		f, err := parseFlags(tc.args, io.Discard)
		if err != nil || f.agent.NoPodHistograms != tc.off {
			t.Errorf("%q: NoPodHistograms %v (%v), want %v", tc.args, f.agent.NoPodHistograms, err, tc.off)
		}
	}
}
