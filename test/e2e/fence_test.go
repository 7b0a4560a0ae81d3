package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/sim/cluster"
)

// auditEvent is what the fault test reads of an API server audit event.
type auditEvent struct {
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	ObjectRef struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	Received time.Time `json:"requestReceivedTimestamp"`
	Done     time.Time `json:"stageTimestamp"`
}

func (a auditEvent) String() string {
	r := a.ObjectRef.Resource
	if a.ObjectRef.Subresource != "" {
		r += "/" + a.ObjectRef.Subresource
	}
	return a.Done.Format("15:04:05.000") + " " + a.Verb + " " + r + " " + a.ObjectRef.Namespace + "/" + a.ObjectRef.Name + " → " + strconv.Itoa(a.ResponseStatus.Code)
}

// readAudit reads every event of the API server's audit log.
func readAudit(t *testing.T, path string) []auditEvent {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []auditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var ev auditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("audit log line %q: %v", sc.Text(), err)
		}
		out = append(out, ev)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// by says an event came from the orchestrator replica with this identity
// (its User-Agent ends in nodewise-orchestrator/IDENTITY).
func (a auditEvent) by(identity string) bool {
	return strings.HasSuffix(a.UserAgent, model.FieldManager+"/"+identity)
}

func (a auditEvent) landed() bool { return a.ResponseStatus.Code >= 200 && a.ResponseStatus.Code < 300 }

// TestDeposedLeaderWritesNothing is #27's fault test for finding 9: two
// orchestrator processes, a rollout in progress; the leader is SIGSTOPped
// past its lease, the standby takes over, then the old leader is SIGCONTed
// with its workers and its planner woken mid-step (the soak it slept in has
// ended). From the API server's audit log: no write of the old leader's
// lands after the new leader acquired the Lease. From the Nodes (a watcher
// of its own): never more than maxUnavailable nodes cordoned or without
// their data plane, and the rollout completes.
func TestDeposedLeaderWritesNothing(t *testing.T) {
	const nodes, budget = 6, 2
	e := newEnvWith(t, cluster.Options{Nodes: nodes, Zones: 1, AuditLog: true})
	w := e.watch()
	e.upgrade("1.28.1")
	a := e.startProcess("fence-a", "127.0.0.1:0")
	waitHolder(t, e, "fence-a")
	e.startProcess("fence-b", "127.0.0.1:0")
	e.apply(rollout("fence", func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(budget), intstr.FromInt32(budget)
		s.Soak = &v1alpha1.Duration{Duration: 3 * time.Second}
	}))
	soaking := e.waitStep("fence", v1alpha1.NodeSoak)
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	t.Logf("fence-a stopped with %s soaking", soaking)
	waitHolder(t, e, "fence-b")
	time.Sleep(3 * time.Second) // the new leader acts; the old one's soak timers have all run out
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("fence-a continued after %s stopped (lease 4s, renew deadline 3s)", time.Since(stopped).Round(10*time.Millisecond))
	// The audit is read whether or not the rollout ends: a deposed leader's
	// writes can leave it stuck, and the audit says why.
	var nr *v1alpha1.NodeRollout
	_ = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := e.rollouts.Get(ctx, "fence", metav1.GetOptions{})
		if err == nil {
			nr = got
		}
		return err == nil && (got.Status.Phase == v1alpha1.PhaseCompleted || got.Status.Phase == v1alpha1.PhaseHalted), nil
	})
	defer func() {
		if nr == nil || nr.Status.Phase != v1alpha1.PhaseCompleted {
			t.Errorf("the rollout did not complete: %+v", nr.Status)
			return
		}
		e.assertAllOnNewest(nodes)
	}()
	time.Sleep(time.Second) // the audit log is written as each request completes

	events := readAudit(t, e.c.AuditLog)
	var acquired time.Time
	var before, refusedAfter int
	for _, ev := range events {
		if acquired.IsZero() && ev.by("fence-b") && ev.ObjectRef.Resource == "leases" && ev.ObjectRef.Name == model.LeaseName && ev.Verb == "update" && ev.landed() {
			acquired = ev.Received
		}
	}
	if acquired.IsZero() {
		t.Fatal("the audit log shows no Lease update by fence-b: the handover cannot be placed")
	}
	for _, ev := range events {
		if !ev.by("fence-a") {
			continue
		}
		switch {
		case ev.Done.Before(acquired):
			before++
		case ev.landed():
			t.Errorf("a write of the deposed leader landed after fence-b acquired the Lease at %s: %s", acquired.Format("15:04:05.000"), ev)
		default:
			refusedAfter++
			t.Logf("refused after the handover: %s", ev)
		}
	}
	t.Logf("fence-a: %d writes before the handover at %s, %d refused by the API server after it", before, acquired.Format("15:04:05.000"), refusedAfter)
	if before == 0 {
		t.Error("the audit log shows no write of fence-a: the User-Agent does not name the replica, the test proves nothing")
	}
	got, worst := w.max()
	t.Logf("max unavailable seen %d (%s)", got, worst)
	if got > budget {
		t.Errorf("watcher saw %d nodes unavailable at once (> maxUnavailable %d): %s", got, budget, worst)
	}
	landedAfter := 0
	for _, ev := range events {
		if ev.by("fence-a") && !ev.Done.Before(acquired) && ev.landed() {
			landedAfter++
		}
	}
	t.Logf("fence-a: %d writes landed after the handover", landedAfter)
	data, _ := os.ReadFile(a.log)
	t.Logf("fence-a's log says 'not leading' %d times", strings.Count(string(data), "not leading"))
}
