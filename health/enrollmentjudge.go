package health

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/wire"
)

// EnrollmentVerdict is the gate on a node's enrollment across its swap.
type EnrollmentVerdict struct {
	// Summary is the one count per node: "enrolled 9/10".
	Summary string
	// Failures fail the node: a pod enrolled before the swap that is not
	// after it, or a pod new on the node since that is not enrolled.
	Failures []string
	// Notes are reported only: pods never enrolled, pods gone, pods that
	// could not be checked.
	Notes []string
	// Pods is one line per pod not enrolled after the swap (at most
	// maxEnrollmentPods), for the judgement's EnrollmentPods.
	Pods []string
}

// maxEnrollmentPods bounds NodeJudgement.EnrollmentPods (its CRD MaxItems).
const maxEnrollmentPods = 32

// JudgeEnrollment compares a node's enrollment before the swap with the one
// at the end of the soak. A pod enrolled before and not after fails the node,
// naming the check that failed; so does a pod new on the node that is not
// enrolled (istio-cni no longer enrols). A pod never enrolled is reported, not
// failed; a pod that cannot be checked after the swap is reported too (the
// agent could not look, which says nothing of the swap). after nil (an agent
// that does not check enrollment) gives an empty verdict; before nil with
// after present counts every pod as new.
func JudgeEnrollment(before, after *wire.Enrollment) EnrollmentVerdict {
	var v EnrollmentVerdict
	if after == nil {
		return v
	}
	if after.Error != "" {
		v.Summary = "enrollment not checked"
		v.Failures = append(v.Failures, "enrollment: the agent could not check it: "+after.Error)
		return v
	}
	was := map[string]wire.PodEnrollment{}
	if before != nil {
		for _, p := range before.Pods {
			was[p.UID] = p
		}
	}
	n, total := after.Count()
	v.Summary = fmt.Sprintf("enrolled %d/%d", n, total)
	seen := map[string]bool{}
	for _, p := range after.Pods {
		seen[p.UID] = true
		b, known := was[p.UID]
		if p.Result != wire.Enrolled && len(v.Pods) < maxEnrollmentPods {
			line := p.String()
			switch {
			case p.Result == wire.NotCheckable:
			case !known:
				line += ": new since the swap, fails the node"
			case b.Result == wire.Enrolled:
				line += ": enrolled before the swap, fails the node"
			default:
				line += ": not enrolled before the swap either, reported only"
			}
			v.Pods = append(v.Pods, line)
		}
		switch {
		case p.Result == wire.Enrolled:
		case p.Result == wire.NotCheckable:
			v.Notes = append(v.Notes, "enrollment: "+p.String())
		case !known:
			v.Failures = append(v.Failures, fmt.Sprintf("enrollment: pod %s, new on the node since the swap, is not enrolled: %s failed: %s", p.Key(), p.Failed, p.Detail))
		case b.Result == wire.Enrolled:
			v.Failures = append(v.Failures, fmt.Sprintf("enrollment: pod %s was enrolled before the swap and is not after it: %s failed: %s", p.Key(), p.Failed, p.Detail))
		default:
			v.Notes = append(v.Notes, fmt.Sprintf("enrollment: pod %s was not enrolled before the swap either (%s), not counted against it", p.Key(), p.String()))
		}
	}
	var gone []string
	for uid, p := range was {
		if !seen[uid] {
			gone = append(gone, p.Key())
		}
	}
	if len(gone) > 0 {
		sort.Strings(gone)
		v.Notes = append(v.Notes, "enrollment: gone from the node since the swap: "+strings.Join(gone, ", "))
	}
	return v
}

// EnrollmentBefore is the enrollment of the last baseline snapshot that
// carries one: the pods' standing just before the swap (nil: none does).
func EnrollmentBefore(baseline []wire.Snapshot) *wire.Enrollment {
	for i := len(baseline) - 1; i >= 0; i-- {
		if e := baseline[i].Enrollment; e != nil {
			return e
		}
	}
	return nil
}

func enrollmentBefore(in Input) *wire.Enrollment { return EnrollmentBefore(in.Baseline) }

// WatchEnrollment is the soak's enrollment watchdog on one check, made once
// the bound after the new pods were Ready has passed: every pod enrolled
// before the swap and still on the node must be enrolled now. It returns one
// failure per pod that is not, naming the pod and the check that failed
// (the readiness probe of a new ztunnel says nothing of every pod's
// listeners). Pods new since the swap, never enrolled, gone, or not
// checkable are left to the judgement at the soak's end (JudgeEnrollment),
// as is an agent that could not check at all (now.Error) or does not check
// (now nil): the watchdog fails a node only on evidence. before nil (no
// baseline enrollment, e.g. an agent that started checking since) holds
// nothing either.
func WatchEnrollment(before, now *wire.Enrollment) []string {
	if before == nil || now == nil || now.Error != "" {
		return nil
	}
	was := map[string]bool{}
	for _, p := range before.Pods {
		if p.Result == wire.Enrolled {
			was[p.UID] = true
		}
	}
	var out []string
	for _, p := range now.Pods {
		if p.Result == wire.NotEnrolled && was[p.UID] {
			out = append(out, fmt.Sprintf("pod %s was enrolled before the swap and is not now: %s failed: %s", p.Key(), p.Failed, p.Detail))
		}
	}
	return out
}

// gateEnrollment fails the node when a pod lost its enrollment in the swap
// (or a new pod was never enrolled), whatever the traffic figures say: the
// verdict names the pods and checks, and says what traffic alone decided.
// It records the node's count in sum either way.
func (j *Judge) gateEnrollment(in Input, cur wire.Snapshot, a Assessment, sum *v1alpha1.NodeJudgement, traffic []string) (Verdict, bool) {
	ev := JudgeEnrollment(enrollmentBefore(in), cur.Enrollment)
	sum.Enrollment, sum.EnrollmentPods = ev.Summary, ev.Pods
	if cur.Enrollment != nil {
		sum.TrafficOutcome = a.Outcome
	}
	if len(ev.Failures) == 0 {
		return Verdict{}, false
	}
	sum.IntervalOutcome = Fail
	reasons := append([]string(nil), ev.Failures...)
	reasons = append(reasons, fmt.Sprintf("%s on the node; the traffic figures alone: %s", ev.Summary, a.Outcome))
	reasons = append(reasons, traffic...)
	reasons = append(reasons, ev.Notes...)
	return j.finish(in, Verdict{Outcome: Fail, Headline: Lead(ev.Failures), Reasons: reasons, Summary: sum}), true
}

// enrollmentNotes are the enrollment findings reported without failing.
func enrollmentNotes(in Input, cur wire.Snapshot) []string {
	return JudgeEnrollment(enrollmentBefore(in), cur.Enrollment).Notes
}

// writeEnrollment adds the judgement's enrollment to an explanation: the
// count, what the traffic alone decided, and each pod not enrolled.
func writeEnrollment(b *strings.Builder, s *v1alpha1.NodeJudgement) {
	if s.Enrollment == "" {
		return
	}
	fmt.Fprintf(b, "\nenrollment: %s of the node's ambient pods", s.Enrollment)
	if s.TrafficOutcome != "" {
		fmt.Fprintf(b, "; the traffic figures alone: %s", s.TrafficOutcome)
	}
	for _, p := range s.EnrollmentPods {
		fmt.Fprintf(b, "\n  %s", p)
	}
}

// WatchdogVerdict is the node's Fail by the enrollment watchdog
// (WatchEnrollment's failures), soaked into its soak and past
// spec.enrollmentTimeout, at now: the verdict the worker persists with the
// Failed record.
func WatchdogVerdict(before, cur *wire.Enrollment, failures []string, soaked, timeout time.Duration, now time.Time) Verdict {
	ev := JudgeEnrollment(before, cur)
	reasons := make([]string, 0, len(failures)+1)
	for _, f := range failures {
		reasons = append(reasons, "enrollment watchdog: "+f)
	}
	reasons = append(reasons, fmt.Sprintf("%s after the soak began with the new pods Ready (spec.enrollmentTimeout %s), before the soak's end; %s on the node",
		soaked.Round(time.Second), timeout, ev.Summary))
	return Verdict{Outcome: Fail, Headline: Lead(reasons[:len(failures)]), Reasons: reasons,
		Summary: &v1alpha1.NodeJudgement{IntervalOutcome: Fail, Enrollment: ev.Summary, EnrollmentPods: ev.Pods,
			SoakSeconds: int32(soaked / time.Second), JudgedAt: now.UTC().Format(time.RFC3339)}}
}
