package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// asUser is a NodeRollout client authenticated (impersonated) as user, with
// every right (group system:masters): admission is the only check left.
func (e *env) asUser(user string) v1alpha1.NodeRolloutInterface {
	e.t.Helper()
	cfg := rest.CopyConfig(e.c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:masters", "system:authenticated"}}
	nwc, err := v1alpha1.NewForConfig(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return nwc.NodeRollouts()
}

// verbPatch is a merge patch setting annotations (nil value: left out) and spec.
func verbPatch(ann map[string]string, spec string) []byte {
	meta, _ := json.Marshal(map[string]any{"annotations": ann})
	if spec == "" {
		return fmt.Appendf(nil, `{"metadata":%s}`, meta)
	}
	return fmt.Appendf(nil, `{"metadata":%s,"spec":%s}`, meta, spec)
}

// waitRequest waits until the rollout's status records verb by user, and an
// Event of the verb names user; it returns the record.
func (e *env) waitRequest(rollout, verb, user string) v1alpha1.VerbRequest {
	e.t.Helper()
	var got v1alpha1.VerbRequest
	e.waitFor(func(ctx context.Context) bool {
		nr, err := e.rollouts.Get(ctx, rollout, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, r := range nr.Status.Requests {
			if r.Verb == verb {
				got = r
			}
		}
		return got.By == user
	}, fmt.Sprintf("status.requests to record the %s by %s", verb, user))
	e.waitFor(func(context.Context) bool {
		return strings.Contains(strings.Join(e.rolloutEvents(rollout, model.RequestReason(verb)), "\n"), "requested by "+user)
	}, fmt.Sprintf("a %s Event naming %s", model.RequestReason(verb), user))
	return got
}

// TestVerbsRecordWhoAsked: with deploy/'s admission policies, each verb
// (resume, pause, skip, abort) is recorded in status.requests and an Event
// under the user the API server authenticated, never the name a client
// wrote. alice's resume naming bob, or naming no one, is refused; bob may not
// re-sign alice's resume; a skip whose request JSON says "by":"carol" is
// recorded under bob, who wrote it.
func TestVerbsRecordWhoAsked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 2, 1)
	applyDeploy(t, e.c)
	e.upgrade("1.28.1")
	ctx := context.Background()
	alice, bob := e.asUser("alice"), e.asUser("bob")
	e.runInProcess("who")
	// Created paused, and no node may start for an hour: the verbs below
	// move nothing but the record.
	later := metav1.NewTime(time.Now().Add(time.Hour))
	e.apply(rollout("who", func(s *v1alpha1.NodeRolloutSpec) { s.Paused, s.NotBefore = true, &later }))
	e.waitPhase("who", time.Minute, v1alpha1.PhasePaused)

	resume := func(by string) []byte {
		ann := map[string]string{model.AnnotationResumeToken: time.Now().UTC().Format(time.RFC3339Nano)}
		if by != "" {
			ann[model.AnnotationResumedBy] = by
		}
		return verbPatch(ann, `{"paused":false}`)
	}
	// The policy reaches the admission chain within a few seconds: until
	// it refuses alice's resume naming bob, nothing else is checked.
	e.waitFor(func(ctx context.Context) bool {
		_, err := alice.Patch(ctx, "who", types.MergePatchType, resume("bob"), metav1.PatchOptions{})
		if err == nil {
			t.Fatalf("alice's resume naming bob (nodewise.io/resumed-by: bob) was admitted")
		}
		return strings.Contains(err.Error(), "nodewise.io/resumed-by")
	}, "the admission policy to refuse a resume naming someone else")
	if _, err := alice.Patch(ctx, "who", types.MergePatchType, resume(""), metav1.PatchOptions{}); err == nil || !strings.Contains(err.Error(), "set it to alice") {
		t.Fatalf("alice's resume naming no one: %v; want refused, telling her to name herself", err)
	}
	if _, err := alice.Patch(ctx, "who", types.MergePatchType, resume("alice"), metav1.PatchOptions{}); err != nil {
		t.Fatalf("alice's resume naming alice: %v", err)
	}
	r := e.waitRequest("who", model.VerbResume, "alice")
	if r.At.IsZero() || r.Token == "" {
		t.Errorf("resume record %+v: want when and the token", r)
	}
	// bob cannot put his name on alice's resume, nor take it off.
	for what, ann := range map[string]map[string]string{"re-sign": {model.AnnotationResumedBy: "bob"}, "erase": {model.AnnotationResumedBy: ""}} {
		if _, err := bob.Patch(ctx, "who", types.MergePatchType, verbPatch(ann, ""), metav1.PatchOptions{}); err == nil {
			t.Errorf("bob's %s of resumed-by without a resume was admitted", what)
		}
	}

	if _, err := bob.Patch(ctx, "who", types.MergePatchType, verbPatch(map[string]string{model.AnnotationPausedBy: "alice"}, `{"paused":true}`), metav1.PatchOptions{}); err == nil {
		t.Fatal("bob's pause naming alice was admitted")
	}
	if _, err := bob.Patch(ctx, "who", types.MergePatchType, verbPatch(map[string]string{model.AnnotationPausedBy: "bob"}, `{"paused":true}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("bob's pause: %v", err)
	}
	e.waitRequest("who", model.VerbPause, "bob")

	// A skip: the request JSON names carol, the annotation beside it the
	// writer, bob; naming alice there is refused.
	node := e.c.Nodes[1].Name
	e.waitFor(func(ctx context.Context) bool {
		nr, err := e.rollouts.Get(ctx, "who", metav1.GetOptions{})
		return err == nil && len(nr.Status.Nodes) == 2
	}, "the plan's node entries")
	skip := func(by string) []byte {
		raw, _ := json.Marshal(map[string]string{"token": time.Now().UTC().Format(time.RFC3339Nano), "verb": model.VerbSkip, "node": node, "reason": "disk to be replaced", "by": "carol"})
		return verbPatch(map[string]string{model.AnnotationNodeRequest: string(raw), model.AnnotationNodeRequestBy: by}, "")
	}
	if _, err := bob.Patch(ctx, "who", types.MergePatchType, skip("alice"), metav1.PatchOptions{}); err == nil {
		t.Fatal("bob's skip naming alice was admitted")
	}
	if _, err := bob.Patch(ctx, "who", types.MergePatchType, skip("bob"), metav1.PatchOptions{}); err != nil {
		t.Fatalf("bob's skip: %v", err)
	}
	if r := e.waitRequest("who", model.VerbSkip, "bob"); r.Node != node {
		t.Errorf("skip record %+v: want node %s", r, node)
	}
	e.waitFor(func(ctx context.Context) bool {
		nr, err := e.rollouts.Get(ctx, "who", metav1.GetOptions{})
		return err == nil && nodeStatus(nr, node).State == v1alpha1.NodeSkipped
	}, node+" Skipped")
	nr, err := e.rollouts.Get(ctx, "who", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := nodeStatus(nr, node).Reason; !strings.Contains(got, "skipped by bob") {
		t.Errorf("%s's reason %q: want skipped by bob (the request's JSON said carol)", node, got)
	}

	if _, err := alice.Patch(ctx, "who", types.MergePatchType, verbPatch(map[string]string{model.AnnotationAbortedBy: "alice"}, `{"abort":true}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("alice's abort: %v", err)
	}
	e.waitRequest("who", model.VerbAbort, "alice")
	nr = e.waitPhase("who", time.Minute, v1alpha1.PhaseAborted)
	by := map[string]string{}
	for _, r := range nr.Status.Requests {
		by[r.Verb] = r.By
	}
	if want := map[string]string{model.VerbResume: "alice", model.VerbPause: "bob", model.VerbSkip: "bob", model.VerbAbort: "alice"}; fmt.Sprint(by) != fmt.Sprint(want) {
		t.Errorf("status.requests by verb %v, want %v", by, want)
	}
}
