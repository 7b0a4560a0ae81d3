package sidecar

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/testkit"
)

// TestConformanceJobOnRealNode: the conformance Job's pod runs as a real
// container on the real kubelet (the orchestrator's image, given a flag it
// does not know: it prints its usage and exits 2); the job controller fails
// the Job, and the migration halts before anything moves with the Job's name
// and the container's own last log lines, read through the API server.
func TestConformanceJobOnRealNode(t *testing.T) {
	e := start(t, 3, "1.27.3", "1.28.1")
	ctx, cancel := context.WithTimeout(e.ctx, 2*time.Minute)
	defer cancel()
	bin := os.Getenv("NODEWISE_BIN_DIR")
	if bin == "" {
		bin = filepath.Join(testkit.RepoRoot(), "bin")
	}
	n, err := e.c.StartRealNode(ctx, t.TempDir(), cluster.RealNodeOptions{Name: "real-001", BinDir: bin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Stop)
	ref, err := n.Containerd.Import(ctx, filepath.Join(bin, "images", "orchestrator.tar"))
	if err != nil {
		t.Fatal(err)
	}
	e.namespace("r-1", map[string]string{"istio.io/rev": "1-27", v1alpha1.DefaultTierLabel: "1"}, app{name: "web", replicas: 1})
	e.allOn(time.Minute, "1.27.3", 1, "r-1")
	e.controller(nil)

	job := testkit.ConformanceJob()
	ps := &job.Spec.Template.Spec
	uid := int64(65532)
	ps.SecurityContext.RunAsUser = &uid
	ps.NodeName = n.Name
	ps.Tolerations = []corev1.Toleration{{Key: cluster.TaintRealNode, Operator: corev1.TolerationOpExists}}
	ps.Containers[0].Image, ps.Containers[0].ImagePullPolicy = ref, corev1.PullNever
	ps.Containers[0].Args = []string{"--no-such-flag"}
	if _, err := e.mc.Create(ctx, &v1alpha1.RevisionMigration{
		ObjectMeta: metav1.ObjectMeta{Name: "r"},
		Spec: v1alpha1.RevisionMigrationSpec{From: "1-27", To: "1-28", RateLimit: v1alpha1.RestartRateLimit{PodsPerSecond: 5},
			Gates: &v1alpha1.GatesSpec{Conformance: &v1alpha1.ConformanceGate{Namespace: "default", JobTemplate: job}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rm := e.waitPhase("r", time.Minute, v1alpha1.MigrationHalted)
	if r := rm.Status.Reason; !strings.Contains(r, "r-conformance-start-1 failed") || !strings.Contains(r, "last log lines of pod") || !strings.Contains(r, "no-such-flag") {
		t.Fatalf("halt reason %q, want the Job failed and the container's last log lines naming the flag", r)
	}
	if rev := e.labels("r-1")["istio.io/rev"]; rev != "1-27" {
		t.Fatalf("r-1 relabelled after a failed conformance Job: istio.io/rev=%s", rev)
	}
}
