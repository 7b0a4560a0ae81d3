package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/silence"
	"github.com/nodewise/nodewise/test/promrig"
)

// TestAlertmanagerSilenceWhileNodeOut: with --alertmanager-url, the real
// Alertmanager holds an active silence over a node's alerts exactly while
// the node is in flight: made before its cordon, none for the node still
// Pending, none once every node is handed back. After a kill -9 of the
// orchestrator holding it, the silence expires on its own within its TTL.
func TestAlertmanagerSilenceWhileNodeOut(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	am := promrig.StartAlertmanager(t)
	e := newEnv(t, 2, 1)
	e.upgrade("1.28.1")
	flags := []string{"--alertmanager-url", am.URL, "--alertmanager-silence-extend", "500ms", "--alertmanager-silence-ttl", ttl.String()}
	first := e.startProcess("first", "127.0.0.1:0", append(flags, "--test-hold-after-persist", string(v1alpha1.NodeSwapCNI))...)
	e.apply(rollout("hush", func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
	}))
	node := e.waitStep("hush", v1alpha1.NodeSwapCNI)

	// In flight (held at its istio-cni swap): one active silence, this node's.
	held := activeSilences(t, am)
	if len(held) != 1 {
		t.Fatalf("%d active silences with node %s in flight, want exactly its one: %+v", len(held), node, held)
	}
	s := held[0]
	if want := (silence.Matcher{Name: "node", Value: node, IsEqual: true}); len(s.Matchers) != 1 || s.Matchers[0] != want {
		t.Fatalf("silence matchers %+v, want [%+v]", s.Matchers, want)
	}
	if s.CreatedBy != "nodewise" || !strings.Contains(s.Comment, "NodeRollout hush") || !strings.Contains(s.Comment, node) {
		t.Fatalf("silence by %q, comment %q: want nodewise naming the rollout and the node", s.CreatedBy, s.Comment)
	}
	n, err := e.c.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cordoned, err := time.Parse(time.RFC3339Nano, n.Annotations[model.AnnotationSwapSince]); err != nil || s.StartsAt.After(cordoned) {
		t.Fatalf("silence starts %s, node cordoned %q: want the silence first", s.StartsAt, n.Annotations[model.AnnotationSwapSince])
	}

	// kill -9: nothing extends it, nothing expires it; it runs out its TTL.
	first.kill()
	killed := time.Now()
	left := waitSilence(t, am, s.ID, func(s silence.Silence) bool { return !s.Active() })
	if left.Status.State != "expired" || left.EndsAt.After(killed.Add(ttl)) {
		t.Fatalf("silence after the kill: %s, ends %s: want expired, ending within %s of the kill (%s)", left.Status.State, left.EndsAt, ttl, killed)
	}

	// A successor finishes the rollout: each node had its silence, none is left.
	e.startProcess("second", "127.0.0.1:0", flags...)
	if nr := e.waitPhase("hush", 2*time.Minute, v1alpha1.PhaseCompleted, v1alpha1.PhaseHalted); nr.Status.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("phase %s: %s", nr.Status.Phase, nr.Status.HaltReason)
	}
	silenced := map[string]bool{}
	for _, s := range allSilences(t, am) {
		if s.Active() {
			t.Errorf("silence %s over %+v still active after the rollout", s.ID, s.Matchers)
		}
		silenced[s.Matchers[0].Value] = true
	}
	if len(silenced) != 2 {
		t.Errorf("silences made for nodes %v, want both", silenced)
	}
}

// allSilences reads every silence of the Alertmanager am.
func allSilences(t *testing.T, am *promrig.Server) []silence.Silence {
	t.Helper()
	var out []silence.Silence
	am.GetJSON(t, "/api/v2/silences", &out)
	return out
}

// activeSilences is allSilences' active ones.
func activeSilences(t *testing.T, am *promrig.Server) []silence.Silence {
	t.Helper()
	var out []silence.Silence
	for _, s := range allSilences(t, am) {
		if s.Active() {
			out = append(out, s)
		}
	}
	return out
}

// waitSilence polls silence id until cond holds, and returns it.
func waitSilence(t *testing.T, am *promrig.Server, id string, cond func(silence.Silence) bool) silence.Silence {
	t.Helper()
	var got silence.Silence
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for _, s := range allSilences(t, am) {
			if s.ID == id {
				got = s
				return cond(s), nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("silence %s: %+v, never as waited for", id, got)
	}
	return got
}
