package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/notify"
)

// TestNotifyOneMessagePerHalt: a rollout halts on a PodDisruptionBudget that
// never yields; the webhook receiver gets exactly one Slack-shaped message for
// it, naming the node and the reason, and nothing more while it stays halted.
func TestNotifyOneMessagePerHalt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3, 1)
	guarded := e.c.Nodes[0].Name
	e.blockDrain(guarded)
	var mu sync.Mutex
	var got []string
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]string
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, m["text"])
		mu.Unlock()
	}))
	defer rcv.Close()
	n, err := notify.New(notify.Config{Source: e.rollouts, URL: rcv.URL + "/hook", Cluster: "e2e-west", Every: 200 * time.Millisecond, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	defer func() { cancel(); <-done }()
	time.Sleep(500 * time.Millisecond) // the notifier's first look: nothing yet

	e.runInProcess("solo")
	e.upgrade("1.28.1")
	e.apply(rollout("notify-halt", func(s *v1alpha1.NodeRolloutSpec) {
		s.CanaryNodes = []string{guarded}
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(1), intstr.FromInt32(1)
		s.Drain = v1alpha1.DrainSpec{Policy: v1alpha1.DrainAlways, PDBBlocked: v1alpha1.PDBHalt, Timeout: &v1alpha1.Duration{Duration: 3 * time.Second}}
	}))
	nr := e.waitPhase("notify-halt", 2*time.Minute, v1alpha1.PhaseHalted, v1alpha1.PhaseCompleted)
	if nr.Status.Phase != v1alpha1.PhaseHalted {
		t.Fatalf("phase %s, want Halted on the PodDisruptionBudget", nr.Status.Phase)
	}
	time.Sleep(2 * time.Second) // ten more looks at the halted rollout
	mu.Lock()
	defer mu.Unlock()
	var halts []string
	for _, m := range got {
		if strings.Contains(m, "halted") {
			halts = append(halts, m)
		}
	}
	if len(halts) != 1 {
		t.Fatalf("%d halt messages %q, want exactly 1", len(halts), got)
	}
	if !strings.Contains(halts[0], "notify-halt halted at "+guarded) || !strings.Contains(halts[0], "PodDisruptionBudget") {
		t.Errorf("halt message %q does not name the node %s and the PodDisruptionBudget reason", halts[0], guarded)
	}
	if !strings.Contains(halts[0], "[e2e-west]") {
		t.Errorf("halt message %q does not name the cluster e2e-west", halts[0])
	}
}
