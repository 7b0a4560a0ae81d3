package sidecar

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodewise/nodewise/istio/freshness"
	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/istio/skew"
	"github.com/nodewise/nodewise/test/testkit"
)

// TestFreshnessTwoTeams measures two teams' proxies on the real API server,
// with restart histories the test makes itself (so their cadence is known):
// team payments' cart restarts every 3 s and its namespace now points at
// the designated revision, so a restart will bring it; team checkout's
// legacy, in the same namespace, never restarted; team search's namespace
// is on the old revision, so no restart will. The report names each team's
// laggards and the window within its stated error, and the CLI prints them.
func TestFreshnessTwoTeams(t *testing.T) {
	e := start(t, 3, "1.27.3", "1.28.1")
	ctx, cs := e.ctx, e.c.Client
	e.namespace("shop", map[string]string{"istio.io/rev": "1-27", "team": "payments", "owner": "ana"}, app{name: "cart", replicas: 1}, app{name: "legacy", replicas: 1})
	e.namespace("search", map[string]string{"istio.io/rev": "1-27", "team": "search"}, app{name: "index", replicas: 1, sts: true})
	if _, err := cs.AppsV1().Deployments("shop").Patch(ctx, "legacy", types.MergePatchType, []byte(`{"metadata":{"labels":{"team":"checkout"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.allOn(time.Minute, "1.27.3", 2, "shop")
	e.allOn(time.Minute, "1.27.3", 1, "search")

	// Two rollout restarts of cart, 3 s apart: three ReplicaSets, a cadence of 3 s.
	const cadence = 3 * time.Second
	for i := range 2 {
		time.Sleep(cadence)
		patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":"%d"}}}}}`, i)
		if _, err := cs.AppsV1().Deployments("shop").Patch(ctx, "cart", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Rolled out: the controller saw the last patch, and one cart pod is left.
	testkit.WaitFor(t, time.Minute, "cart rolled out", func() (bool, error) {
		d, err := cs.AppsV1().Deployments("shop").Get(ctx, "cart", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		st := d.Status
		if st.ObservedGeneration < d.Generation || st.UpdatedReplicas != 1 || st.Replicas != 1 || st.AvailableReplicas != 1 {
			return false, fmt.Errorf("cart: %+v", st)
		}
		tags, notReady := e.proxies("shop")
		return len(tags) == 2 && notReady == 0, fmt.Errorf("shop: %d ready, %d not", len(tags), notReady)
	})
	// Now shop points at 1.28: its pods are stale until they restart.
	if _, err := cs.CoreV1().Namespaces().Patch(ctx, "shop", types.MergePatchType, []byte(`{"metadata":{"labels":{"istio.io/rev":"1-28"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	now := time.Now()
	r, err := freshness.Observe(ctx, cs, inventory.Options{}, freshness.Target{Version: skew.MustParse("1.28.1"), MaxMinorsBehind: 0}, freshness.Keys{}, now)
	if err != nil {
		t.Fatal(err)
	}
	teams := map[string]freshness.Group{}
	for _, g := range r.Teams {
		teams[g.Name] = g
		t.Log(r.Line(g))
	}
	t.Log(r.Summary())
	var cart freshness.Workload
	for _, w := range r.Workloads {
		if w.Ref() == "Deployment shop/cart" {
			cart = w
		}
	}
	// Creation times have a resolution of a second, and the Deployment
	// controller creates each ReplicaSet a moment after the patch: the
	// measured cadence is the test's within 1 s, and the next restart is
	// stated within the window's error of the one the cadence implies.
	if (cart.Cadence.Duration-cadence).Abs() > time.Second || len(cart.Restarts) != 3 || cart.Owner != "ana" {
		t.Fatalf("cart: cadence %s from %d restarts, owner %q; want %s from 3, owner ana", cart.Cadence.Duration, len(cart.Restarts), cart.Owner, cadence)
	}
	if p := teams["payments"]; p.Stale != 1 || p.Lagging != 1 || p.Exposure.Never != 0 || p.Exposure.Window.Duration <= 0 || p.Exposure.Window.Duration > cart.Cadence.Duration+p.Exposure.Error.Duration {
		t.Errorf("payments: %+v; want cart stale with a window within one cadence (%s)", p, cart.Cadence.Duration)
	}
	if c := teams["checkout"]; c.Stale != 1 || c.Exposure.Never != 1 {
		t.Errorf("checkout: %+v; want legacy stale and never restarting by itself", c)
	}
	if s := teams["search"]; s.Stale != 1 || s.Exposure.Never != 1 {
		t.Errorf("search: %+v; want index stale and pinned to the old revision", s)
	}

	bin := testkit.Binary(t, "nodewise")
	out := nodewiseCLI(t, bin, "--kubeconfig="+e.c.Kubeconfig, "freshness", "--to", "1.28.1", "--max-minors-behind", "0")
	t.Logf("nodewise freshness:\n%s", out)
	for _, want := range []string{"freshness: 3 of 3 teams behind 1.28.1 (3 of 3 sidecar pods)", "StatefulSet search/index (team search): 1 stale pod, never: its namespace is on revision 1-27 (1.27.3)",
		"Deployment shop/legacy (team checkout, owner ana): 1 stale pod, never expected: no restart cadence"} {
		if !strings.Contains(out, want) {
			t.Errorf("nodewise freshness lacks %q", want)
		}
	}
	if out := nodewiseCLI(t, bin, "--kubeconfig="+e.c.Kubeconfig, "freshness", "--to", "1.28.1", "--contract", "--max-age", "30d"); !strings.Contains(out, "every meshed pod younger than 30d") || !strings.Contains(out, "sidecar at most 1 minor behind its istiod") {
		t.Errorf("contract:\n%s", out)
	}
	cmd := exec.Command(bin, "--kubeconfig="+e.c.Kubeconfig, "freshness", "--max-age", "30 days")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), "--max-age") {
		t.Errorf("--max-age '30 days': %v %q; want refused naming the flag", err, stderr.String())
	}
}

func nodewiseCLI(t *testing.T, bin string, args ...string) string {
	t.Helper()
	out, err := exec.Command(bin, args...).Output()
	if err != nil {
		t.Fatalf("nodewise %s: %v", strings.Join(args, " "), err)
	}
	return string(out)
}
