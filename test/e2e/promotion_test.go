package e2e

import (
	"context"
	"html"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/clusters"
	"github.com/nodewise/nodewise/dashboard"
	"github.com/nodewise/nodewise/test/testkit"
)

// TestPromotionFromStaging: production's rollout, promoted from staging,
// waits in Pending while staging cannot be read (with the error), while
// staging has not rolled the same images, and while a rollout of them is
// Halted there; it starts once staging's rollout of them completed more
// than soakAfter ago, and completes.
func TestPromotionFromStaging(t *testing.T) {
	t.Parallel()
	staging, prod := newEnv(t, 2, 1), newEnv(t, 2, 1)
	ctx := context.Background()
	testkit.PromotionSecrets(t, prod.c.Client, "default", staging.c.Kubeconfig, staging.c.Config.Host)
	staging.upgrade("1.28.1")
	prod.upgrade("1.28.1")
	prod.runInProcess("prod")

	// An upstream that cannot be read holds the rollout, with its error.
	prod.apply(rollout("up", func(s *v1alpha1.NodeRolloutSpec) {
		s.Promotion = &v1alpha1.PromotionSpec{Upstreams: []v1alpha1.Upstream{{Name: "staging", KubeconfigSecret: testkit.GoneSecret}},
			SoakAfter: &v1alpha1.Duration{Duration: 3 * time.Second}}
	}))
	prod.waitReason(t, "up", "cannot read upstream staging:", "connection refused")

	// Staging, read: nothing rolled there yet.
	nr, err := prod.rollouts.Get(ctx, "up", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nr.Spec.Promotion.Upstreams[0].KubeconfigSecret = testkit.UpstreamSecret
	if _, err := prod.rollouts.Update(ctx, nr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	prod.waitReason(t, "up", "upstream staging: no NodeRollout has completed images", "ztunnel:1.28.1")

	// A rollout of these images Halted in staging (its status as the
	// orchestrator writes a halt) keeps production waiting.
	images := prodImages(t, prod)
	staging.apply(rollout("halted", nil))
	halted, err := staging.rollouts.Get(ctx, "halted", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	halted.Status.Phase, halted.Status.HaltReason = v1alpha1.PhaseHalted, "node-001: resets sent 0/s → 2.9/s"
	halted.Status.Targets = []v1alpha1.TargetStatus{{Namespace: ns, Name: "ztunnel", Images: images}}
	if _, err := staging.rollouts.UpdateStatus(ctx, halted, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	prod.waitReason(t, "up", "upstream staging: NodeRollout halted of these images is Halted", "resets sent")
	// Both clusters on one page, the dashboard's, and in `nodewise fleet`:
	// production's rollout with why it waits, staging's halt.
	page := clustersPage(t, []clusters.Cluster{{Name: "staging", Config: staging.c.Config}, {Name: "production", Config: prod.c.Config}}, prod)
	for _, want := range []string{"production", "Pending", "upstream staging: NodeRollout halted of these images is Halted", "staging", "node-001: resets sent"} {
		if !strings.Contains(html.UnescapeString(page), want) {
			t.Errorf("the dashboard's clusters page lacks %q:\n%s", want, page)
		}
	}
	if err := staging.rollouts.Delete(ctx, "halted", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// Staging rolls the same images to Completed: production waits out
	// soakAfter from that completion, then starts and completes.
	staging.runInProcess("staging")
	staging.apply(rollout("rehearsal", nil))
	done := staging.waitPhase("rehearsal", 2*time.Minute, v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted)
	if done.Status.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("staging: %s %s", done.Status.Phase, done.Status.HaltReason)
	}
	got := prod.waitPhase("up", 2*time.Minute, v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted)
	if got.Status.Phase != v1alpha1.PhaseCompleted || got.Status.StartTime == nil || got.Status.StartTime.Time.Before(done.Status.CompletionTime.Add(3*time.Second)) {
		t.Fatalf("production: %s started %v, staging completed %v: want Completed, started soakAfter (3s) after staging completed", got.Status.Phase, got.Status.StartTime, done.Status.CompletionTime)
	}
	prod.assertAllOnNewest(2)
}

// waitReason waits until the rollout is Pending with a reason holding
// every part.
func (e *env) waitReason(t *testing.T, name string, parts ...string) {
	t.Helper()
	var last *v1alpha1.NodeRollout
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		nr, err := e.rollouts.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = nr
		if nr.Status.Phase != v1alpha1.PhasePending {
			return false, nil
		}
		for _, p := range parts {
			if !strings.Contains(nr.Status.PhaseReason(), p) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%s: phase %s reason %q; want Pending with %q", name, last.Status.Phase, last.Status.PhaseReason(), parts)
	}
}

// prodImages are the images of the ztunnel DaemonSet's template.
func prodImages(t *testing.T, e *env) []string {
	t.Helper()
	ds, err := e.c.Client.AppsV1().DaemonSets(ns).Get(context.Background(), "ztunnel", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range ds.Spec.Template.Spec.Containers {
		out = append(out, c.Image)
	}
	return out
}

// clustersPage serves the dashboard (read-only) with a clusters page over
// cs and returns that page.
func clustersPage(t *testing.T, cs []clusters.Cluster, e *env) string {
	t.Helper()
	srv, err := dashboard.New(dashboard.Config{Rollouts: e.rollouts, ReadOnly: true,
		Clusters: func(ctx context.Context) []clusters.Report { return clusters.Read(ctx, cs, clusters.Options{}) }})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	defer func() { cancel(); <-done }()
	var page string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		resp, err := http.Get("http://" + ln.Addr().String() + "/clusters")
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		page = string(b)
		return resp.StatusCode == http.StatusOK, nil // 503 until its caches are listed
	})
	if err != nil {
		t.Fatalf("GET /clusters: %v\n%s", err, page)
	}
	return page
}
