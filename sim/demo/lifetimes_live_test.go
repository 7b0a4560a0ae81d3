package demo

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/nodewise/nodewise/istio/precheck"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/sim/injector"
	"github.com/nodewise/nodewise/test/testkit"
)

// TestLivePrecheckReadsConnectionLifetimes: on the live data plane, whose
// sidecar namespaces catalog and ledger hold streams open for 30 s and more
// (past the proxies' 5 s drain), `nodewise precheck` with the agents' CA,
// token and port reads the real eBPF node agents over HTTPS and warns of
// both namespaces' long-lived connections; once a DestinationRule sets a
// maximum connection duration for catalog's service, it warns of ledger
// alone.
func TestLivePrecheckReadsConnectionLifetimes(t *testing.T) {
	t.Parallel()
	inj, err := injector.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inj.Close)
	inj.SetRevision("1-27", "1.27.3")
	e := newLiveEnvWired(t, 2, testAgents(t), func(o *cluster.IstioOptions) { o.InjectorURL, o.CABundle = inj.URL, inj.CABundle })
	cluster.InstallCRDs(t, e.c, testkit.IstioCRD(t, "destinationrules.networking.istio.io"))
	bin := testkit.Binary(t, "nodewise")
	precheckOut := func() string {
		t.Helper()
		cmd := exec.Command(bin, "--kubeconfig="+e.c.Kubeconfig, "precheck",
			"--agent-ca", e.agents.CAFile, "--agent-token-file", e.agents.TokenFile, "--agent-port", strconv.Itoa(e.agents.Port))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr, cmd.Env = &out, &out, append(os.Environ(), "PATH=/nonexistent") // no istioctl: its analyzers are another test's
		if err := cmd.Run(); err != nil {
			t.Fatalf("nodewise precheck: %v\n%s", err, out.String())
		}
		return out.String()
	}
	warning := func(ns string) string { return "Warning connection-lifetime: namespace " + ns + ": " }
	var out string
	testkit.WaitFor(t, 30*time.Second, "both sidecar namespaces' streams past the drain", func() (bool, error) {
		out = precheckOut()
		return strings.Contains(out, warning("catalog")) && strings.Contains(out, warning("ledger")), errors.New(out)
	})
	t.Logf("nodewise precheck:\n%s", out)
	if !strings.Contains(out, "outlive the proxies' 5s drain") || !strings.Contains(out, "\nconnection lifetimes: read from ") || strings.Contains(out, "no answer from") {
		t.Errorf("nodewise precheck printed\n%s\nwant the 5 s drain named and every node agent read", out)
	}

	dyn, err := dynamic.NewForConfig(e.c.Config)
	if err != nil {
		t.Fatal(err)
	}
	dr := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.istio.io/v1", "kind": "DestinationRule",
		"metadata": map[string]any{"namespace": "catalog", "name": "recycle"},
		"spec": map[string]any{"host": "search",
			"trafficPolicy": map[string]any{"connectionPool": map[string]any{"tcp": map[string]any{"maxConnectionDuration": "30m"}}}},
	}}
	if _, err := dyn.Resource(precheck.DestinationRules).Namespace("catalog").Create(context.Background(), dr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	out = precheckOut()
	t.Logf("with catalog's DestinationRule:\n%s", out)
	if strings.Contains(out, warning("catalog")) || !strings.Contains(out, warning("ledger")) {
		t.Errorf("with a maximum connection duration for catalog, nodewise precheck printed\n%s\nwant ledger's warning alone", out)
	}
}
