package sidecar

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio/precheck"
	"github.com/nodewise/nodewise/revisions"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/testkit"
)

// TestPrecheckRefusesAMigration: with two hazards present (a namespace on a
// tag nothing serves; a dry-run AuthorizationPolicy, of Istio's own CRD,
// while every ztunnel is older than 1.29 and istiod 1.29 is installed), the
// controller refuses a migration naming both, `nodewise precheck` prints
// both and exits 4, and once they are fixed a migration starts.
func TestPrecheckRefusesAMigration(t *testing.T) {
	e := start(t, 3, "1.28.1", "1.29.0")
	ctx, cs := e.ctx, e.c.Client
	installAuthorizationPolicyCRD(t, e)
	dyn, err := dynamic.NewForConfig(e.c.Config)
	if err != nil {
		t.Fatal(err)
	}
	e.namespace("shop", map[string]string{"istio.io/rev": "1-28"}, app{name: "web", replicas: 1})
	e.namespace("lost", map[string]string{"istio.io/rev": "stable"})
	ap := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "security.istio.io/v1", "kind": "AuthorizationPolicy",
		"metadata": map[string]any{"namespace": "shop", "name": "deny-all", "annotations": map[string]any{"istio.io/dry-run": "true"}},
		"spec":     map[string]any{},
	}}
	if _, err := dyn.Resource(precheck.AuthorizationPolicies).Namespace("shop").Create(ctx, ap, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.controllerWith(revisions.Config{Dynamic: dyn}, e.c.Config)

	e.migrate28to29("hazards")
	rm := e.waitPhase("hazards", 30*time.Second, v1alpha1.MigrationRefused, v1alpha1.MigrationProgressing, v1alpha1.MigrationSucceeded)
	t.Logf("refused: %s", rm.Status.Reason)
	for _, want := range []string{"precheck found 2 errors", "namespace lost: istio.io/rev=stable names no tag", "AuthorizationPolicy shop/deny-all: is dry-run"} {
		if rm.Status.Phase != v1alpha1.MigrationRefused || !strings.Contains(rm.Status.Reason, want) {
			t.Fatalf("migration %s: %s; want Refused saying %q", rm.Status.Phase, rm.Status.Reason, want)
		}
	}
	if labels := e.migrationNamespaceRev(t, "shop"); labels != "1-28" {
		t.Errorf("shop moved to %q while refused", labels)
	}

	bin := testkit.Binary(t, "nodewise")
	cmd := exec.Command(bin, "--kubeconfig="+e.c.Kubeconfig, "precheck", "--istioctl="+istioctl(t))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	t.Logf("nodewise precheck:\n%s%s", out.String(), errOut.String())
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 4 {
		t.Errorf("nodewise precheck: %v, want exit 4", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "Error ") || !strings.Contains(out.String(), "Error namespace-revision: namespace lost") || !strings.Contains(out.String(), "Error dry-run-policy: AuthorizationPolicy shop/deny-all") ||
		lines[len(lines)-1] != "istioctl analyze: included" {
		t.Errorf("nodewise precheck printed %q; want both errors, one line each, errors first, then istioctl analyze's", lines)
	}

	// Fixed: the namespace names the old revision, the policy leaves dry-run.
	if _, err := cs.CoreV1().Namespaces().Patch(ctx, "lost", types.MergePatchType, []byte(`{"metadata":{"labels":{"istio.io/rev":"1-28"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(precheck.AuthorizationPolicies).Namespace("shop").Patch(ctx, "deny-all", types.MergePatchType, []byte(`{"metadata":{"annotations":{"istio.io/dry-run":null}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.migrate28to29("fixed")
	if rm := e.waitPhase("fixed", time.Minute, v1alpha1.MigrationRefused, v1alpha1.MigrationProgressing, v1alpha1.MigrationGating, v1alpha1.MigrationSucceeded); rm.Status.Phase == v1alpha1.MigrationRefused {
		t.Fatalf("fixed: refused: %s", rm.Status.Reason)
	}
}

// migrate28to29 creates a migration of name from 1-28 to 1-29, 5 pods a second.
func (e *env) migrate28to29(name string) {
	e.t.Helper()
	rm := &v1alpha1.RevisionMigration{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.RevisionMigrationSpec{From: "1-28", To: "1-29", RateLimit: v1alpha1.RestartRateLimit{PodsPerSecond: 5}}}
	if _, err := e.mc.Create(e.ctx, rm, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) migrationNamespaceRev(t *testing.T, ns string) string {
	t.Helper()
	n, err := e.c.Client.CoreV1().Namespaces().Get(e.ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Labels["istio.io/rev"]
}

// installAuthorizationPolicyCRD applies Istio's own AuthorizationPolicy CRD,
// as the built istioctl renders it in Istio's base chart.
func installAuthorizationPolicyCRD(t *testing.T, e *env) {
	t.Helper()
	cluster.InstallCRDs(t, e.c, testkit.IstioCRD(t, "authorizationpolicies.security.istio.io"))
}

// TestPrecheckRefusesAnUnpullableProxy: a canary pod of revision 1-29 could
// not pull 1-29's sidecar proxy on its node (it waits in ErrImagePull). A
// migration of shop, whose DaemonSet runs a pod on every node, onto 1-29
// is refused with one line naming that node and the image, and shop is
// not touched; `nodewise precheck` prints the same line and exits 4. Once
// 1-29 injects an image that pulls and the failed pod is gone, a migration
// starts.
func TestPrecheckRefusesAnUnpullableProxy(t *testing.T) {
	e := start(t, 3, "1.28.1", "1.29.0")
	ctx, cs := e.ctx, e.c.Client
	e.namespace("shop", map[string]string{"istio.io/rev": "1-28"}, app{name: "web", ds: true})
	e.allOn(time.Minute, "1.28.1", 3, "shop")
	const image = "docker.io/istio/proxyv2:1.29.0" + cluster.TagNoPull
	e.inj.SetRevision("1-29", "1.29.0"+cluster.TagNoPull)
	e.namespace("canary", map[string]string{"istio.io/rev": "1-29"}, app{name: "web", replicas: 1})
	var node string
	testkit.WaitFor(t, 30*time.Second, "the canary's proxy in ErrImagePull", func() (bool, error) {
		pods, err := cs.CoreV1().Pods("canary").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			for _, c := range p.Status.ContainerStatuses {
				if c.Image == image && c.State.Waiting != nil && c.State.Waiting.Reason == "ErrImagePull" {
					node = p.Spec.NodeName
					return true, nil
				}
			}
		}
		return false, fmt.Errorf("%d canary pods, none waiting in ErrImagePull for %s", len(pods.Items), image)
	})
	e.controller(nil)
	e.migrate28to29("unpullable")
	rm := e.waitPhase("unpullable", 30*time.Second, v1alpha1.MigrationRefused, v1alpha1.MigrationProgressing, v1alpha1.MigrationSucceeded)
	line := "Error image-pull: node " + node + ": cannot pull " + image + ", which RevisionMigration unpullable's revision 1-29 (its sidecar proxy) needs: ErrImagePull"
	if rm.Status.Phase != v1alpha1.MigrationRefused || !strings.Contains(rm.Status.Reason, "precheck found 1 error") || !strings.Contains(rm.Status.Reason, line) {
		t.Fatalf("migration %s: %s; want Refused with the one finding %q", rm.Status.Phase, rm.Status.Reason, line)
	}
	if c := meta.FindStatusCondition(rm.Status.Conditions, revisions.ConditionComplete); c == nil || c.Reason != string(v1alpha1.MigrationRefused) || !strings.Contains(c.Message, line) {
		t.Errorf("Complete condition %+v, want Refused naming the node", c)
	}
	if rev := e.migrationNamespaceRev(t, "shop"); rev != "1-28" {
		t.Errorf("shop moved to %q while refused", rev)
	}

	cmd := exec.Command(testkit.Binary(t, "nodewise"), "--kubeconfig="+e.c.Kubeconfig, "precheck")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr, cmd.Env = &out, &out, append(os.Environ(), "PATH=/nonexistent") // no istioctl: its analyzers are another test's
	err := cmd.Run()
	t.Logf("nodewise precheck:\n%s", out.String())
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 4 || !strings.Contains("\n"+out.String(), "\n"+line) {
		t.Errorf("nodewise precheck: %v; want exit 4 and the line %q", err, line)
	}

	e.inj.SetRevision("1-29", "1.29.0")
	if err := cs.CoreV1().Pods("canary").DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	e.allOn(time.Minute, "1.29.0", 1, "canary")
	e.migrate28to29("fixed")
	if rm := e.waitPhase("fixed", 30*time.Second, v1alpha1.MigrationRefused, v1alpha1.MigrationProgressing, v1alpha1.MigrationGating, v1alpha1.MigrationSucceeded); rm.Status.Phase == v1alpha1.MigrationRefused {
		t.Fatalf("fixed: refused: %s", rm.Status.Reason)
	}
}
