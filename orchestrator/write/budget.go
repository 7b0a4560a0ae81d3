package write

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// objectBudget bounds what a NodeRollout's status costs the stored object,
// in bytes. etcd refuses a request over 1.5 MiB (--max-request-bytes), and
// the object carries more than the status's JSON: its spec and metadata,
// and in metadata.managedFields the API server's record of every field the
// status writer set, which names each node entry's fields again (about as
// many bytes as the entry). The status and that record get 896 KiB, the
// spec and the rest of the metadata 128 KiB: the object stays under 1 MiB.
// An entry with a judge's judgement is a few KiB, one with the readiness
// gate's verdict ≈ 400 bytes, a passed one trimmed to its outcome ≈ 250
// bytes with its record: from about 3,500 nodes not every entry fits even
// trimmed, and the status omits some (omit.go).
const objectBudget = 896 << 10

// statusBudget bounds a status's JSON alone, for fitStatus; the status
// writer keeps to objectBudget, which is always the tighter.
const statusBudget = 1 << 20

// trimmedMark ends a verdict whose detail fitStatus dropped.
const trimmedMark = " (detail trimmed)"

// messageLimit bounds every free-text field of the status (condition
// messages, the halt reason, each node's reason, verdict and detail) in bytes. The
// API server refuses a Condition message over 32,768 characters, and then
// every later status write of the rollout with it; a halt reason built
// from hundreds of failing samples gets there. 8 KiB still names the first
// dozens of reasons; the rest is cut with a mark saying how much.
const messageLimit = 8 << 10

// boundMessages cuts every free-text field of s to messageLimit.
func boundMessages(s *v1alpha1.NodeRolloutStatus) {
	s.HaltReason = model.Truncate(s.HaltReason, messageLimit)
	for i := range s.Conditions {
		s.Conditions[i].Message = model.Truncate(s.Conditions[i].Message, messageLimit)
	}
	for i := range s.Nodes {
		n := &s.Nodes[i]
		n.Reason, n.Verdict = model.Truncate(n.Reason, messageLimit), model.Truncate(n.Verdict, messageLimit)
		n.Detail = boundDetail(n.Detail, messageLimit)
	}
}

// detailItems is the CRD's bound on a node's detail lines (MaxItems).
const detailItems = 64

// boundDetail keeps a verdict's detail within limit bytes and detailItems
// lines: the first lines whole while they fit (the first one cut when it
// alone does not), then one line counting the rest. The detail is returned
// as it was when it fits, else copied.
func boundDetail(detail []string, limit int) []string {
	kept, size := 0, 0
	for kept < len(detail) && kept < detailItems && size+len(detail[kept]) <= limit {
		size += len(detail[kept])
		kept++
	}
	if kept == len(detail) {
		return detail
	}
	out := append([]string(nil), detail[:kept]...)
	if kept == 0 {
		out, kept = append(out, model.Truncate(detail[0], limit/2)), 1
	}
	if cut := len(detail) - kept; cut > 0 {
		if len(out) == detailItems {
			out, cut = out[:detailItems-1], cut+1
		}
		out = append(out, fmt.Sprintf("… %d more reasons cut (status size)", cut))
	}
	return out
}

// fitStatus trims s to budget bytes of JSON (trimEntries, measured by
// jsonSize alone, every step in turn) and returns how many entries it
// trimmed.
func fitStatus(s *v1alpha1.NodeRolloutStatus, budget int) int {
	_, n := trimEntries(s, budget, jsonOnly, append(detailSteps, recordSteps...))
	return n
}

// trimStep is one cut trimEntries makes to the entries of one kind; cut
// says whether it changed the entry.
type trimStep struct {
	kind entryKind
	cut  func(*v1alpha1.NodeStatus) bool
}

// The steps of trimEntries, in order:
//
//  1. the nodes that passed (Done or RolledBack, not failing), oldest finish
//     first: their judgement goes and their verdict keeps its outcome word;
//
//  2. the same nodes' start and state-change times (the finish time stays);
//
//  3. the before/after rows of the judgements of nodes in flight (their
//     counters, which a successor resumes from, stay);
//
//  4. the control records of nodes in flight (up to 16 KiB each): a
//     successor then judges such a node before/after alone, which is only
//     stricter;
//
//  5. the baseline records of nodes in flight (up to 32 KiB each, so many
//     nodes in flight at once may not fit them all): a successor then fails
//     such a node closed, as without a record.
//
//  6. only then the failed and skipped nodes, oldest finish first: the
//     before/after rows of their judgements, then their judgement (the
//     verdict keeps its outcome word and the reason stays).
//
// The status writer omits the entries of history (omit.go) between steps 3
// and 4: what a successor resumes a node with goes last.
var (
	detailSteps = []trimStep{{kindPassed, trimVerdict}, {kindPassed, trimTimes}, {kindInFlight, trimRows}}
	recordSteps = []trimStep{{kindInFlight, trimControls}, {kindInFlight, trimBaseline}, {kindEnded, trimRows}, {kindEnded, trimVerdict}}
)

// trimEntries keeps s within budget, as sz measures it, making the steps'
// cuts in turn until it fits. Every free-text field is first cut to
// messageLimit (boundMessages), and nothing the planner reads (state, zone,
// wave, canary, finish time) is touched. It returns the size it measured
// after trimming and how many entries it trimmed; a status that fits is
// left as it is.
func trimEntries(s *v1alpha1.NodeRolloutStatus, budget int, sz sizer, steps []trimStep) (size, trimmed int) {
	boundMessages(s)
	size = sz.status(s)
	if size <= budget {
		return size, 0
	}
	kinds := entryKinds(s)
	cut := map[int]bool{}
	for _, step := range steps {
		for _, i := range kinds[step.kind] {
			if size <= budget {
				return size, len(cut)
			}
			n := &s.Nodes[i]
			was := *n // a cut replaces what it changes, never changes it in place
			if !step.cut(n) {
				continue
			}
			if before, after := sz.entry(&was), sz.entry(n); after < before {
				size -= before - after
				cut[i] = true
			}
		}
	}
	return size, len(cut)
}

// entryKind is what a node entry is to the budget.
type entryKind int

const (
	kindPassed   entryKind = iota // Done or RolledBack, not failing
	kindInFlight                  // in flight
	kindEnded                     // Failed or Skipped
	kindPending                   // not started
	kindSkipped                   // the Skipped ones among kindEnded (omitEntries)
)

// entryKinds are the indexes of s's entries by kind, those that ended
// oldest finish first (an unknown finish first), the others in s's order.
func entryKinds(s *v1alpha1.NodeRolloutStatus) map[entryKind][]int {
	kinds := map[entryKind][]int{}
	for i, n := range s.Nodes {
		k := kindPending
		switch {
		case (n.State == v1alpha1.NodeDone || n.State == v1alpha1.NodeRolledBack) && !strings.HasPrefix(n.Verdict, string(v1alpha1.OutcomeFail)):
			k = kindPassed
		case model.InFlight(n.State):
			k = kindInFlight
		case n.State == v1alpha1.NodeFailed || n.State == v1alpha1.NodeSkipped || n.State == v1alpha1.NodeDone || n.State == v1alpha1.NodeRolledBack:
			k = kindEnded
		}
		kinds[k] = append(kinds[k], i)
	}
	for _, k := range []entryKind{kindPassed, kindEnded} {
		idx := kinds[k]
		sort.SliceStable(idx, func(a, b int) bool {
			fa, fb := s.Nodes[idx[a]].FinishTime, s.Nodes[idx[b]].FinishTime
			return (fa == nil && fb != nil) || (fa != nil && fb != nil && fa.Before(fb))
		})
	}
	return kinds
}

// FitStatus brings s within the status budget as the status writer writes
// it (fit) and returns how many entries it trimmed and how many it omitted.
func FitStatus(s *v1alpha1.NodeRolloutStatus) (trimmed, omitted int) {
	var out v1alpha1.NodeRolloutStatus
	out, trimmed, omitted, _ = fit(s)
	*s = out
	return trimmed, omitted
}

// trimVerdict drops a passed node's judgement and detail and keeps its
// verdict's outcome word.
func trimVerdict(n *v1alpha1.NodeStatus) bool {
	if n.Judgement == nil && n.Detail == nil && (n.Verdict == "" || strings.HasSuffix(n.Verdict, trimmedMark)) {
		return false
	}
	n.Judgement, n.Detail = nil, nil
	if n.Verdict != "" {
		outcome, _, _ := strings.Cut(n.Verdict, ":")
		n.Verdict = outcome + trimmedMark
	}
	return true
}

func trimTimes(n *v1alpha1.NodeStatus) bool {
	had := n.StartTime != nil || n.StateSince != nil
	n.StartTime, n.StateSince = nil, nil
	return had
}

// trimRows drops a judgement's before/after rows, keeping its counters.
func trimRows(n *v1alpha1.NodeStatus) bool {
	if n.Judgement == nil || (n.Judgement.Rows == nil && n.Judgement.PodAges == nil) {
		return false
	}
	j := *n.Judgement
	j.Rows, j.PodAges = nil, nil
	n.Judgement = &j
	return true
}

func trimControls(n *v1alpha1.NodeStatus) bool {
	had := n.Controls != ""
	n.Controls = ""
	return had
}

func trimBaseline(n *v1alpha1.NodeStatus) bool {
	had := n.Baseline != "" || n.Controls != ""
	n.Baseline, n.Controls = "", ""
	return had
}

func jsonSize(v any) int {
	data, err := json.Marshal(v)
	if err != nil {
		return 0
	}
	return len(data)
}
