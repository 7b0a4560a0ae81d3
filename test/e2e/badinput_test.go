package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/test/testkit"
)

const goodRollout = `apiVersion: nodewise.io/v1alpha1
kind: NodeRollout
metadata:
  name: bad
spec:
  maxParallel: 2
  maxUnavailable: 1
  maintenanceWindows:
  - {start: "00:00", end: "24:00", timeZone: Europe/Berlin}
`

// TestBadInputRejected: each bad rollout gets a one-line error and a
// non-zero exit from plan and apply, nothing is written, and the API server
// rejects the same object through the CRD's validation.
func TestBadInputRejected(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3, 1)
	bin := testkit.Binary(t, "nodewise")
	dir := t.TempDir()
	cases := []struct {
		name, yaml, want string
		apiRejects       bool // the CRD can express the rule
	}{
		{"malformed YAML", "apiVersion: nodewise.io/v1alpha1\nkind: NodeRollout\nmetadata: {name: bad}\nspec: {maxParallel: [\n", "malformed", false},
		{"unknown DaemonSet", strings.Replace(goodRollout, "spec:\n", "spec:\n  targets: [{namespace: istio-system, name: ztunnel-typo}]\n", 1), "ztunnel-typo not found", false},
		{"maxParallel 0", strings.Replace(goodRollout, "maxParallel: 2", "maxParallel: 0", 1), "maxParallel", true},
		{"maxUnavailable 0%", strings.Replace(goodRollout, "maxUnavailable: 1", "maxUnavailable: '0%'", 1), "maxUnavailable", true},
		{"window ends where it starts", strings.Replace(goodRollout, `end: "24:00"`, `end: "00:00"`, 1), "must differ from its start", true},
		{"unknown time zone", strings.Replace(goodRollout, "Europe/Berlin", "Europe/Atlantis", 1), "unknown time zone", true},
		{"standing and pinned", strings.Replace(goodRollout, "spec:\n", "spec:\n  standing: true\n  version: 1.28.1\n", 1), "spec.standing and spec.version are exclusive", true},
		{"standing and rolled back", strings.Replace(goodRollout, "spec:\n", "spec:\n  standing: true\n  rollback: true\n", 1), "spec.rollback is for one-shot rollouts", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			if err := os.WriteFile(file, []byte(tc.yaml), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, verb := range []string{"plan", "apply"} {
				var stdout, stderr bytes.Buffer
				cmd := exec.Command(bin, "--kubeconfig", e.c.Kubeconfig, verb, "-f", file)
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				err := cmd.Run()
				if err == nil {
					t.Errorf("%s exited 0", verb)
				}
				msg := strings.TrimRight(stderr.String(), "\n")
				if strings.Count(msg, "\n") != 0 || !strings.Contains(msg, tc.want) {
					t.Errorf("%s stderr %q: want one line mentioning %q", verb, msg, tc.want)
				}
				if _, err := e.rollouts.Get(context.Background(), "bad", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					t.Fatalf("%s wrote a NodeRollout (get: %v)", verb, err)
				}
			}
			if tc.name == "malformed YAML" {
				return // cannot be sent to the API server at all
			}
			// Send the manifest as written (as kubectl would), not a typed object
			// whose omitempty would drop an explicit 0.
			obj := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(tc.yaml), &obj.Object); err != nil {
				t.Fatal(err)
			}
			dyn, err := dynamic.NewForConfig(e.c.Config)
			if err != nil {
				t.Fatal(err)
			}
			gvr := v1alpha1.GroupVersion.WithResource("noderollouts")
			_, err = dyn.Resource(gvr).Create(context.Background(), obj, metav1.CreateOptions{})
			if tc.apiRejects && err == nil {
				defer func() { _ = e.rollouts.Delete(context.Background(), "bad", metav1.DeleteOptions{}) }()
			}
			switch {
			case tc.apiRejects && err == nil:
				t.Errorf("API server accepted it")
			case tc.apiRejects && !apierrors.IsInvalid(err):
				t.Errorf("API server error %v, want 422 Invalid", err)
			case tc.apiRejects:
				t.Logf("API server: %v", err)
			case !tc.apiRejects && err == nil:
				// A schema cannot know which DaemonSets exist: the orchestrator
				// keeps such a rollout Pending with Valid=False and touches nothing.
				stop, _ := e.runInProcess("validator")
				got := e.waitPhase("bad", time.Minute, v1alpha1.PhasePending)
				for i := 0; i < 20 && !strings.Contains(validMessage(got), tc.want); i++ {
					time.Sleep(200 * time.Millisecond)
					got, _ = e.rollouts.Get(context.Background(), "bad", metav1.GetOptions{})
				}
				stop()
				if !strings.Contains(validMessage(got), tc.want) || got.Status.Counts.InProgress+got.Status.Counts.Done != 0 {
					t.Errorf("orchestrator: phase %s Valid message %q counts %+v", got.Status.Phase, validMessage(got), got.Status.Counts)
				}
				if err := e.rollouts.Delete(context.Background(), "bad", metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestPercentagesAccepted: maxParallel and maxUnavailable as percentages
// pass the CLI's checks and the API server's, come back typed as written,
// and plan resolves them against the cluster's nodes.
func TestPercentagesAccepted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3, 1)
	bin := testkit.Binary(t, "nodewise")
	file := filepath.Join(t.TempDir(), "pct.yaml")
	doc := strings.NewReplacer("maxParallel: 2", "maxParallel: '50%'", "maxUnavailable: 1", "maxUnavailable: '100%'").Replace(goodRollout)
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "--kubeconfig", e.c.Kubeconfig, "plan", "-f", file).CombinedOutput()
	if want := "maxParallel 50% (1 node), maxUnavailable 100% (3 nodes)"; err != nil || !strings.Contains(string(out), want) {
		t.Fatalf("plan: %v; want %q in\n%s", err, want, out)
	}
	if out, err := exec.Command(bin, "--kubeconfig", e.c.Kubeconfig, "apply", "-f", file).CombinedOutput(); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	nr, err := e.rollouts.Get(context.Background(), "bad", metav1.GetOptions{})
	if err != nil || nr.Spec.MaxParallel.String() != "50%" || nr.Spec.MaxUnavailable.String() != "100%" {
		t.Fatalf("read back: %v %+v", err, nr)
	}
}

func validMessage(nr *v1alpha1.NodeRollout) string {
	for _, c := range nr.Status.Conditions {
		if c.Type == "Valid" && c.Status == metav1.ConditionFalse {
			return c.Message
		}
	}
	return ""
}
