package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/nodewise/nodewise/orchestrator"
	"github.com/nodewise/nodewise/orchestrator/judgegate"
	"github.com/nodewise/nodewise/sim/simpki"
	"github.com/nodewise/nodewise/test/chart"
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
	for _, args := range [][]string{{"--bogus"}, {"--lease-duration=soon"}, {"stray"}, {"--agent-sample-every=0s"}} {
		_, err := parseFlags(args, io.Discard)
		if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "orchestrator --help") {
			t.Errorf("parseFlags(%q) = %v; want one line pointing at --help", args, err)
		}
	}
}

func TestRunRefusesTheIssuerWithoutTheNodeRolloutController(t *testing.T) {
	rc := runConfig{controllers: "revisions", kubeconfig: "/nonexistent"}
	rc.issuer.enabled = true
	err := run(t.Context(), rc)
	if err == nil || !strings.Contains(err.Error(), "--agent-issuer") || !strings.Contains(err.Error(), "--agent-ca") {
		t.Errorf("--controllers=revisions --agent-issuer: %v; want the issuer refused and --agent-ca named", err)
	}
}

// With the agents' credentials the revisions controller judges waves through
// them: a runner for the AgentGate's sampler joins the inventory and the
// Lease-held controller. Without them, the same two run alone.
func TestRevisionTasksJudgeWavesThroughTheAgents(t *testing.T) {
	dir := t.TempDir()
	ca, tok := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte("t0ken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	agentsCA, err := simpki.NewCA("agents CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ca, agentsCA.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := orchestrator.Config{Logger: zap.NewNop(), Registry: prometheus.NewRegistry(), RESTConfig: &rest.Config{Host: "https://127.0.0.1:1"}}
	kube := fake.NewClientset()
	plain, err := revisionTasks(kube, cfg, runConfig{})
	if err != nil || len(plain) != 3 {
		t.Fatalf("without agents: %d tasks, %v; want inventory, freshness and controller", len(plain), err)
	}
	cfg.Registry = prometheus.NewRegistry()
	rc := runConfig{}
	rc.agents.CAFile, rc.agents.TokenFile = ca, tok
	judged, err := revisionTasks(kube, cfg, rc)
	if err != nil || len(judged) != 4 {
		t.Fatalf("with --agent-ca and --agent-token-file: %d tasks, %v; want the wave judge's sampler too", len(judged), err)
	}
	rc.agents.TokenFile = ""
	cfg.Registry = prometheus.NewRegistry()
	if _, err := revisionTasks(kube, cfg, rc); err == nil || !strings.Contains(err.Error(), "token file") {
		t.Errorf("--agent-ca without --agent-token-file: %v; want both credentials asked for", err)
	}
	rc.agents.TokenFile, rc.waves.soak = tok, -time.Second
	cfg.Registry = prometheus.NewRegistry()
	if _, err := revisionTasks(kube, cfg, rc); err == nil || !strings.Contains(err.Error(), "--wave-soak") {
		t.Errorf("--wave-soak=-1s: %v; want the flag named", err)
	}
}

// TestDashboardTaskServesReadOnly: --dashboard-addr is off by default, and
// its task listens on the address it names (a taken one is refused at once).
func TestDashboardTaskServesReadOnly(t *testing.T) {
	if rc, err := parseFlags(nil, io.Discard); err != nil || rc.dashboardAddr != "" {
		t.Fatalf("default --dashboard-addr %q (%v), want off", rc.dashboardAddr, err)
	}
	rc, err := parseFlags([]string{"--dashboard-addr=127.0.0.1:0"}, io.Discard)
	if err != nil || rc.dashboardAddr != "127.0.0.1:0" {
		t.Fatalf("--dashboard-addr: %q %v", rc.dashboardAddr, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	cfg := orchestrator.Config{RESTConfig: &rest.Config{Host: "http://127.0.0.1:1"}, Logger: zap.NewNop()}
	if _, err := dashboardTask(ln.Addr().String(), cfg, false, judgegate.AgentConfig{}, nil); err == nil || !strings.Contains(err.Error(), "--dashboard-addr") {
		t.Errorf("a taken address: %v", err)
	}
}

// TestDashboardTaskReadsTheAgents: given the node agents' credentials the
// dashboard reads their history for its plots, so half of them is refused
// as the judge refuses it.
func TestDashboardTaskReadsTheAgents(t *testing.T) {
	cfg := orchestrator.Config{RESTConfig: &rest.Config{Host: "http://127.0.0.1:1"}, Logger: zap.NewNop()}
	half := judgegate.AgentConfig{CAFile: filepath.Join(t.TempDir(), "ca.pem")}
	if _, err := dashboardTask("127.0.0.1:0", cfg, false, half, fake.NewClientset()); err == nil || !strings.Contains(err.Error(), "--agent-token-file") {
		t.Errorf("the agents' CA without their token: %v; want it refused naming --agent-token-file", err)
	}
}

// TestDashboardTaskListensOnLoopbackOnly: the in-cluster dashboard has no
// login of its own, so it is reached only through `kubectl port-forward`
// (the API server authenticates and authorises pods/portforward): an
// address on every interface or a pod IP is refused, naming the flag and
// the way in.
func TestDashboardTaskListensOnLoopbackOnly(t *testing.T) {
	cfg := orchestrator.Config{RESTConfig: &rest.Config{Host: "http://127.0.0.1:1"}, Logger: zap.NewNop()}
	for _, addr := range []string{":0", "0.0.0.0:0", "[::]:0", "10.0.0.7:3100", "nodewise-orchestrator:3100"} {
		if _, err := dashboardTask(addr, cfg, false, judgegate.AgentConfig{}, nil); err == nil || !strings.Contains(err.Error(), "--dashboard-addr") || !strings.Contains(err.Error(), "port-forward") {
			t.Errorf("--dashboard-addr=%s: %v; want it refused, naming the flag and kubectl port-forward", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0"} {
		ln, err := listenDashboard(addr)
		if err != nil {
			t.Errorf("--dashboard-addr=%s: %v", addr, err)
			continue
		}
		if ip := ln.Addr().(*net.TCPAddr).IP; !ip.IsLoopback() {
			t.Errorf("--dashboard-addr=%s listens on %s", addr, ln.Addr())
		}
		ln.Close()
	}
}

// TestChartBindsTheDashboardToLoopback: the chart's orchestrator, with the
// dashboard on, passes an address this binary accepts and that listens on
// loopback alone (a connection to another of this host's addresses is
// refused), and neither the container nor the Service publishes the port.
func TestChartBindsTheDashboardToLoopback(t *testing.T) {
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := free.Addr().(*net.TCPAddr).Port
	free.Close()
	objs, err := chart.Template(t.Context(), "dashboard.enabled=true", fmt.Sprintf("dashboard.port=%d", port))
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, o := range objs {
		switch chart.Key(o) {
		case "Deployment nodewise-system/nodewise-orchestrator":
			var d appsv1.Deployment
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
				t.Fatal(err)
			}
			c := d.Spec.Template.Spec.Containers[0]
			args = c.Args
			for _, p := range c.Ports {
				if p.ContainerPort == int32(port) || p.Name == "dashboard" {
					t.Errorf("the orchestrator container publishes the dashboard's port: %+v", p)
				}
			}
		case "Service nodewise-system/nodewise-orchestrator":
			ports, _, _ := unstructured.NestedSlice(o.Object, "spec", "ports")
			for _, p := range ports {
				if m, _ := p.(map[string]any); m["targetPort"] == "dashboard" || fmt.Sprint(m["port"]) == fmt.Sprint(port) {
					t.Errorf("the Service publishes the dashboard: %v", m)
				}
			}
		}
	}
	if args == nil {
		t.Fatalf("the chart renders no nodewise-orchestrator Deployment (keys %v)", keys(objs))
	}
	rc, err := parseFlags(args, io.Discard)
	if err != nil {
		t.Fatalf("the chart's args %q: %v", args, err)
	}
	if want := fmt.Sprintf("127.0.0.1:%d", port); rc.dashboardAddr != want {
		t.Errorf("the chart renders --dashboard-addr=%s, want %s", rc.dashboardAddr, want)
	}
	cfg := orchestrator.Config{RESTConfig: &rest.Config{Host: "http://127.0.0.1:1"}, Logger: zap.NewNop()}
	serve, err := dashboardTask(rc.dashboardAddr, cfg, false, judgegate.AgentConfig{}, nil)
	if err != nil {
		t.Fatalf("the chart's --dashboard-addr=%s: %v", rc.dashboardAddr, err)
	}
	defer func() { // a task whose context has ended closes its listener
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_ = serve(ctx)
	}()
	if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err != nil {
		t.Errorf("the dashboard does not answer on loopback: %v", err)
	} else {
		c.Close()
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok || ipn.IP.IsLoopback() || ipn.IP.IsLinkLocalUnicast() {
			continue
		}
		if c, err := net.DialTimeout("tcp", net.JoinHostPort(ipn.IP.String(), fmt.Sprint(port)), 5*time.Second); err == nil {
			c.Close()
			t.Errorf("the dashboard answers on %s, not on loopback alone", ipn.IP)
		}
	}
}

func keys(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		out = append(out, chart.Key(o))
	}
	return out
}

// The Alertmanager silences are off without --alertmanager-url; with it, the
// matchers given replace the default; its other flags alone are refused.
func TestAlertmanagerFlags(t *testing.T) {
	if rc, err := parseFlags(nil, io.Discard); err != nil || rc.orchestrator.Alertmanager != nil {
		t.Fatalf("no flags: %v, %+v; want no silences", err, rc.orchestrator.Alertmanager)
	}
	rc, err := parseFlags([]string{"--alertmanager-url=http://am:9093", "--alertmanager-matcher=instance=~\"{{.Node}}:.*\"", "--alertmanager-matcher=team=\"mesh\""}, io.Discard)
	if am := rc.orchestrator.Alertmanager; err != nil || am == nil || am.URL != "http://am:9093" || len(am.Matchers) != 2 {
		t.Fatalf("with a URL and two matchers: %v, %+v", err, am)
	}
	if _, err := parseFlags([]string{"--alertmanager-matcher=node=\"{{.Node}}\""}, io.Discard); err == nil || !strings.Contains(err.Error(), "--alertmanager-url") {
		t.Fatalf("a matcher without a URL: %v; want --alertmanager-url asked for", err)
	}
}

// The address written on the leader Leases: the flag, else the pod's IP
// with the metrics port, else the metrics address when it names a host;
// never one without a metrics server to answer on it.
func TestAdvertiseAddress(t *testing.T) {
	for _, c := range []struct {
		flag, metrics, podIP, want, err string
	}{
		{metrics: ":8080", podIP: "10.0.0.7", want: "10.0.0.7:8080"},
		{metrics: ":8080", podIP: "fd00::7", want: "[fd00::7]:8080"},
		{metrics: ":8080"},
		{metrics: "0.0.0.0:8080"},
		{metrics: "127.0.0.1:9090", want: "127.0.0.1:9090"},
		{metrics: "127.0.0.1:0"}, // its port is known only once listening
		{flag: "10.1.2.3:8080", metrics: ":8080", podIP: "10.0.0.7", want: "10.1.2.3:8080"},
		{flag: "10.1.2.3", metrics: ":8080", err: "--advertise-address"},
		{flag: "10.1.2.3:8080", err: "needs --metrics-addr"},
		{podIP: "10.0.0.7"},
		{metrics: "8080", err: "--metrics-addr"},
	} {
		got, err := advertiseAddress(c.flag, c.metrics, c.podIP)
		if got != c.want || (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("advertiseAddress(%q, %q, %q) = %q, %v; want %q, error %q", c.flag, c.metrics, c.podIP, got, err, c.want, c.err)
		}
	}
}
