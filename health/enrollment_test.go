package health

import (
	"strings"
	"testing"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/wire"
)

func pe(uid string, r wire.EnrollmentResult, failed wire.EnrollmentCheck) wire.PodEnrollment {
	return wire.PodEnrollment{Namespace: "shop", Name: "p" + uid, UID: uid, Result: r, Failed: failed, Detail: "why"}
}

func TestJudgeEnrollment(t *testing.T) {
	before := &wire.Enrollment{Pods: []wire.PodEnrollment{
		pe("1", wire.Enrolled, ""), pe("2", wire.Enrolled, ""), pe("3", wire.NotEnrolled, wire.CheckRedirection), pe("4", wire.Enrolled, ""), pe("5", wire.Enrolled, ""),
	}}
	after := &wire.Enrollment{Pods: []wire.PodEnrollment{
		pe("1", wire.Enrolled, ""),
		pe("2", wire.NotEnrolled, wire.CheckListeners),   // lost: fails
		pe("3", wire.NotEnrolled, wire.CheckRedirection), // never enrolled: note
		pe("4", wire.NotCheckable, ""),                   // could not look: note
		pe("6", wire.NotEnrolled, wire.CheckRedirection), // new and not enrolled: fails
		pe("7", wire.Enrolled, ""),                       // new and enrolled
	}}
	v := JudgeEnrollment(before, after)
	if v.Summary != "enrolled 2/6" {
		t.Errorf("summary %q, want enrolled 2/6", v.Summary)
	}
	if len(v.Failures) != 2 || !strings.Contains(v.Failures[0], "shop/p2 was enrolled before the swap") || !strings.Contains(v.Failures[0], "listeners failed") ||
		!strings.Contains(v.Failures[1], "shop/p6, new on the node") || !strings.Contains(v.Failures[1], "redirection failed") {
		t.Errorf("failures %q: want p2 (listeners) then p6 (redirection)", v.Failures)
	}
	notes := strings.Join(v.Notes, "\n")
	for _, want := range []string{"shop/p3 was not enrolled before the swap either", "shop/p4 not checkable", "gone from the node since the swap: shop/p5"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes %q: want %q", notes, want)
		}
	}
	if v := JudgeEnrollment(before, nil); v.Summary != "" || len(v.Failures)+len(v.Notes) != 0 {
		t.Errorf("no enrollment after: %+v, want an empty verdict", v)
	}
	if v := JudgeEnrollment(nil, after); len(v.Failures) != 3 {
		t.Errorf("no enrollment before: failures %q, want every not-enrolled pod (2, 3, 6) counted as new", v.Failures)
	}
}

func TestExplainShowsEnrollmentPerPod(t *testing.T) {
	before := &wire.Enrollment{Pods: []wire.PodEnrollment{pe("1", wire.Enrolled, ""), pe("2", wire.Enrolled, "")}}
	after := &wire.Enrollment{Pods: []wire.PodEnrollment{pe("1", wire.Enrolled, ""), pe("2", wire.NotEnrolled, wire.CheckListeners)}}
	v := JudgeEnrollment(before, after)
	var b strings.Builder
	err := WriteExplain(&b, Explanation{Rollout: "r", Node: "n1", Judgement: &v1alpha1.NodeJudgement{Enrollment: v.Summary, EnrollmentPods: v.Pods, TrafficOutcome: Pass}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"enrollment: enrolled 1/2 of the node's ambient pods; the traffic figures alone: Pass", "shop/p2 not enrolled (listeners: why): enrolled before the swap, fails the node"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("explain:\n%s\nwant %q", b.String(), want)
		}
	}
}

// TestWatchEnrollment: the soak's watchdog fails each pod enrolled before the
// swap that a check finds not enrolled, naming its check, and leaves every
// other pod (new, never enrolled, not checkable, gone) and an agent that
// could not check to the judgement at the soak's end.
func TestWatchEnrollment(t *testing.T) {
	before := &wire.Enrollment{Pods: []wire.PodEnrollment{
		pe("1", wire.Enrolled, ""), pe("2", wire.Enrolled, ""), pe("3", wire.NotEnrolled, wire.CheckRedirection), pe("4", wire.Enrolled, ""), pe("5", wire.Enrolled, ""), pe("8", wire.Enrolled, ""),
	}}
	now := &wire.Enrollment{Pods: []wire.PodEnrollment{
		pe("1", wire.Enrolled, ""),
		pe("2", wire.NotEnrolled, wire.CheckListeners),   // lost its listeners: fails
		pe("3", wire.NotEnrolled, wire.CheckRedirection), // never enrolled: left
		pe("4", wire.NotCheckable, ""),                   // could not look: left
		pe("6", wire.NotEnrolled, wire.CheckRedirection), // new: left to the soak's end
		pe("8", wire.NotEnrolled, wire.CheckRedirection), // lost its redirection: fails
	}}
	got := WatchEnrollment(before, now)
	want := []string{
		"pod shop/p2 was enrolled before the swap and is not now: listeners failed: why",
		"pod shop/p8 was enrolled before the swap and is not now: redirection failed: why",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("failures %q, want %q", got, want)
	}
	for name, c := range map[string]struct{ before, now *wire.Enrollment }{
		"no baseline enrollment": {nil, now},
		"agent does not check":   {before, nil},
		"agent could not check":  {before, &wire.Enrollment{Error: "no ztunnel", Pods: now.Pods}},
		"all enrolled again":     {before, &wire.Enrollment{Pods: []wire.PodEnrollment{pe("1", wire.Enrolled, ""), pe("2", wire.Enrolled, "")}}},
	} {
		if got := WatchEnrollment(c.before, c.now); len(got) != 0 {
			t.Errorf("%s: failures %q, want none", name, got)
		}
	}
}
