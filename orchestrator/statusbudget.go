package orchestrator

import (
	"encoding/json"
	"sort"
	"strings"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// statusBudget bounds a NodeRollout's status in bytes of JSON. etcd refuses
// a request over 1.5 MiB (--max-request-bytes), and the object carries its
// spec and metadata besides: the status gets 1 MiB. An entry with a judge's
// judgement is a few KiB, one with the readiness gate's verdict ≈ 400 bytes,
// so from a few thousand nodes the entries no longer fit as they are.
const statusBudget = 1 << 20

// trimmedMark ends a verdict whose detail fitStatus dropped.
const trimmedMark = " (detail trimmed)"

// fitStatus keeps s within budget, cutting in this order until it fits:
//  1. the nodes that passed (Done or RolledBack, not failing), oldest finish
//     first: their judgement goes and their verdict keeps its outcome word;
//  2. the same nodes' start and state-change times (the finish time stays);
//  3. the before/after rows of the judgements of nodes in flight (their
//     counters, which a successor resumes from, stay);
//  4. the baseline records of nodes in flight (up to 32 KiB each, so many
//     nodes in flight at once may not fit them all): a successor then fails
//     such a node closed, as without a record.
//
// Failed and skipped nodes keep every detail, and nothing the planner reads
// (state, zone, wave, canary, finish time) is touched. It returns how many
// entries it trimmed; a status that fits is left as it is.
func fitStatus(s *v1alpha1.NodeRolloutStatus, budget int) int {
	size := jsonSize(s)
	if size <= budget {
		return 0
	}
	var passed, inFlight []int
	for i, n := range s.Nodes {
		switch {
		case (n.State == v1alpha1.NodeDone || n.State == v1alpha1.NodeRolledBack) && !strings.HasPrefix(n.Verdict, string(v1alpha1.OutcomeFail)):
			passed = append(passed, i)
		case InFlight(n.State):
			inFlight = append(inFlight, i)
		}
	}
	sort.SliceStable(passed, func(a, b int) bool {
		fa, fb := s.Nodes[passed[a]].FinishTime, s.Nodes[passed[b]].FinishTime
		return fa != nil && (fb == nil || fa.Before(fb))
	})
	trimmed := map[int]bool{}
	for _, pass := range []struct {
		nodes []int
		cut   func(*v1alpha1.NodeStatus)
	}{{passed, trimVerdict}, {passed, trimTimes}, {inFlight, trimRows}, {inFlight, trimBaseline}} {
		for _, i := range pass.nodes {
			if size <= budget {
				return len(trimmed)
			}
			n := &s.Nodes[i]
			before := jsonSize(n)
			pass.cut(n)
			if after := jsonSize(n); after < before {
				size -= before - after
				trimmed[i] = true
			}
		}
	}
	return len(trimmed)
}

// trimVerdict drops a passed node's judgement and keeps its verdict's
// outcome word.
// FitStatus is what the status writer does to every status it writes: it
// trims s to the status budget (see fitStatus) and returns how many entries
// it trimmed.
func FitStatus(s *v1alpha1.NodeRolloutStatus) int { return fitStatus(s, statusBudget) }

func trimVerdict(n *v1alpha1.NodeStatus) {
	if n.Judgement == nil && (n.Verdict == "" || strings.HasSuffix(n.Verdict, trimmedMark)) {
		return
	}
	n.Judgement = nil
	if n.Verdict != "" {
		outcome, _, _ := strings.Cut(n.Verdict, ":")
		n.Verdict = outcome + trimmedMark
	}
}

func trimTimes(n *v1alpha1.NodeStatus) { n.StartTime, n.StateSince = nil, nil }

// trimRows drops a judgement's before/after rows, keeping its counters.
func trimRows(n *v1alpha1.NodeStatus) {
	if n.Judgement != nil && n.Judgement.Rows != nil {
		j := *n.Judgement
		j.Rows = nil
		n.Judgement = &j
	}
}

func trimBaseline(n *v1alpha1.NodeStatus) { n.Baseline = "" }

func jsonSize(v any) int {
	data, err := json.Marshal(v)
	if err != nil {
		return 0
	}
	return len(data)
}
