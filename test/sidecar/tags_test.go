package sidecar

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/revisions/revtag"
	"github.com/nodewise/nodewise/test/testkit"
)

// binDir holds the built tools (kubectl, istioctl).
func binDir() string {
	if dir := os.Getenv("NODEWISE_BIN_DIR"); dir != "" {
		return dir
	}
	return filepath.Join(testkit.RepoRoot(), "bin")
}

func istioctl(t *testing.T) string {
	t.Helper()
	return tool(t, "istioctl", "hack/build-tool.sh istioctl")
}

// tool finds a built tool in $NODEWISE_BIN_DIR (default bin/).
func tool(t *testing.T, name, build string) string {
	t.Helper()
	p := filepath.Join(binDir(), name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s not built (%v): run %s", name, err, build)
	}
	return p
}

func runIstioctl(t *testing.T, kubeconfig string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, istioctl(t), append(args, "--kubeconfig", kubeconfig)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("istioctl %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// tagRows parses `istioctl tag list` into tag -> "revision namespaces".
func tagRows(out string) map[string]string {
	rows := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) >= 2 {
			rows[f[0]] = strings.Join(f[1:], " ")
		}
	}
	return rows
}

// TestInjectionInventoryAndTags: the test injector really injects at
// admission through the tag a namespace points at; inventory and the
// nodewise_proxy_pods metric report it; tags written by nodewise are read by
// the real istioctl and the other way round.
func TestInjectionInventoryAndTags(t *testing.T) {
	e := start(t, 3, "1.27.3", "1.28.1")
	ctx, cs := e.ctx, e.c.Client

	// nodewise creates the canary tag; a namespace on it gets 1.28 proxies.
	if err := revtag.Set(ctx, cs, revtag.SetOptions{Tag: "canary", Revision: "1-28"}); err != nil {
		t.Fatal(err)
	}
	e.namespace("old", map[string]string{"istio.io/rev": "default"}, app{name: "web", replicas: 2})
	e.namespace("new", map[string]string{"istio.io/rev": "canary"}, app{name: "web", replicas: 2})
	e.namespace("amb", map[string]string{"istio.io/dataplane-mode": "ambient"}, app{name: "web", replicas: 1})
	e.allOn(2*time.Minute, "1.27.3", 2, "old")
	e.allOn(2*time.Minute, "1.28.1", 2, "new")
	// Admission may call an injector more than once per pod (retries), never less.
	if e.inj.Injected("1-28") < 2 || e.inj.Injected("1-27") < 2 {
		t.Fatalf("injections 1-27=%d 1-28=%d, want at least 2 each", e.inj.Injected("1-27"), e.inj.Injected("1-28"))
	}

	inv, err := inventory.Observe(ctx, cs, inventory.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := inv.RevisionVersion("canary"); v != "1.28.1" {
		t.Fatalf("canary resolves to %q", v)
	}
	counts := inv.Counts()
	if counts[inventory.Key{Namespace: "old", Revision: "1-27", Version: "1.27.3", Mode: inventory.ModeSidecar}] != 2 ||
		counts[inventory.Key{Namespace: "new", Revision: "1-28", Version: "1.28.1", Mode: inventory.ModeSidecar}] != 2 {
		t.Fatalf("inventory counts %v", counts)
	}
	// The DaemonSets are OnDelete: installing 1.28 changed the template, not the pods.
	if len(inv.Nodes) != 3 || inv.Nodes[0].Ztunnel != "1.27.3" || inv.Nodes[0].CNI != "1.27.3" || inv.Nodes[0].ZtunnelRevision != "1-27" {
		t.Fatalf("nodes: %+v", inv.Nodes)
	}
	if counts[inventory.Key{Namespace: "amb", Revision: "1-27", Version: "1.27.3", Mode: inventory.ModeAmbient}] != 1 {
		t.Fatalf("ambient pod not attributed to its node's ztunnel: %v", counts)
	}
	reg := prometheus.NewRegistry()
	col, err := inventory.NewCollector(inventory.CollectorConfig{Client: cs, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	col.Refresh(ctx)
	if n := testutil.CollectAndCount(col, "nodewise_proxy_pods"); n < 3 {
		t.Fatalf("nodewise_proxy_pods has %d series, want old, new and amb", n)
	}

	// istioctl reads the tag nodewise wrote, with its namespace.
	kc := e.c.Kubeconfig
	out := runIstioctl(t, kc, "tag", "list")
	t.Logf("istioctl tag list (after nodewise tag set canary):\n%s", out)
	rows := tagRows(out)
	if rows["canary"] != "1-28 new" || !strings.HasPrefix(rows["default"], "1-27") {
		t.Fatalf("istioctl tag list after nodewise set: %v", rows)
	}

	// istioctl writes a tag; nodewise reads it.
	runIstioctl(t, kc, "tag", "set", "prod", "--revision", "1-27", "--skip-confirmation")
	tags, err := revtag.List(ctx, cs, "istio-system")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, tg := range tags {
		got[tg.Name] = tg.Revision
	}
	if got["prod"] != "1-27" || got["canary"] != "1-28" {
		t.Fatalf("nodewise reads %v after istioctl tag set prod", got)
	}
	// A namespace on istioctl's tag is injected by the tag's revision.
	e.namespace("prodns", map[string]string{"istio.io/rev": "prod"}, app{name: "web", replicas: 1})
	e.allOn(2*time.Minute, "1.27.3", 1, "prodns")

	// Moving istioctl's tag needs --overwrite; then istioctl sees it moved, once.
	if err := revtag.Set(ctx, cs, revtag.SetOptions{Tag: "prod", Revision: "1-28"}); !errors.Is(err, revtag.ErrTagExists) {
		t.Fatalf("moving an existing tag without overwrite: %v", err)
	}
	if err := revtag.Set(ctx, cs, revtag.SetOptions{Tag: "prod", Revision: "1-28", Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	out = runIstioctl(t, kc, "tag", "list")
	t.Logf("istioctl tag list (after nodewise moved istioctl's prod tag):\n%s", out)
	if rows := tagRows(out); rows["prod"] != "1-28 prodns" || strings.Count(out, "prod ") != 1 {
		t.Fatalf("istioctl tag list after nodewise moved prod:\n%s", out)
	}
	// New pods in prodns now get 1.28 proxies.
	if err := cs.AppsV1().Deployments("prodns").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.namespace("prodns2", map[string]string{"istio.io/rev": "prod"}, app{name: "web", replicas: 1})
	e.allOn(2*time.Minute, "1.28.1", 1, "prodns2")

	// istioctl tag generate output, applied as is, is read by nodewise.
	gen := runIstioctl(t, kc, "tag", "generate", "blue", "--revision", "1-28")
	applyYAML(t, kc, gen)
	if rev, err := revtag.Get(ctx, cs, "blue"); err != nil || rev != "1-28" {
		t.Fatalf("nodewise reads istioctl-generated tag blue as %q, %v", rev, err)
	}

	// Revision removal is refused while proxies run it, and names them.
	_, err = revtag.RemoveRevision(ctx, cs, nil, "1-27", inventory.Options{}, false)
	if !errors.Is(err, revtag.ErrRevisionInUse) || !strings.Contains(err.Error(), "2 proxies in namespace old") {
		t.Fatalf("removing 1-27 with proxies on it: %v", err)
	}
	if _, err := cs.AppsV1().Deployments("istio-system").Get(ctx, "istiod-1-27", metav1.GetOptions{}); err != nil {
		t.Fatalf("refused removal deleted istiod: %v", err)
	}
}

func applyYAML(t *testing.T, kubeconfig, manifest string) {
	t.Helper()
	kubectl := tool(t, "kubectl", "make tools")
	cmd := exec.Command(kubectl, "--kubeconfig", kubeconfig, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
}
