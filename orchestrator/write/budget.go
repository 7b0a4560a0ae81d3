package planner

import (
	"encoding/json"
	"sort"
	"strings"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// statusBudget bounds a NodeRollout's status in bytes of JSON. etcd refuses
// a request over 1.5 MiB (--max-request-bytes), and the object carries its
// spec and metadata besides: the status gets 1 MiB. An entry with a judge's
// judgement is a few KiB, one with the readiness gate's verdict ≈ 400 bytes,
// so from a few thousand nodes the entries no longer fit as they are.
const statusBudget = 1 << 20

// trimmedMark ends a verdict whose detail fitStatus dropped.
const trimmedMark = " (detail trimmed)"

// messageLimit bounds every free-text field of the status (condition
// messages, the halt reason, each node's reason and verdict) in bytes. The
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
	}
}

// fitStatus keeps s within budget, cutting in this order until it fits:
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
// Every free-text field is first cut to messageLimit (boundMessages), and
// nothing the planner reads (state, zone, wave, canary, finish time) is
// touched. It returns how many entries it trimmed; a status that fits is
// left as it is.
func fitStatus(s *v1alpha1.NodeRolloutStatus, budget int) int {
	boundMessages(s)
	size := jsonSize(s)
	if size <= budget {
		return 0
	}
	var passed, inFlight, ended []int
	for i, n := range s.Nodes {
		switch {
		case (n.State == v1alpha1.NodeDone || n.State == v1alpha1.NodeRolledBack) && !strings.HasPrefix(n.Verdict, string(v1alpha1.OutcomeFail)):
			passed = append(passed, i)
		case model.InFlight(n.State):
			inFlight = append(inFlight, i)
		case n.State == v1alpha1.NodeFailed || n.State == v1alpha1.NodeSkipped:
			ended = append(ended, i)
		}
	}
	byFinish := func(idx []int) {
		sort.SliceStable(idx, func(a, b int) bool {
			fa, fb := s.Nodes[idx[a]].FinishTime, s.Nodes[idx[b]].FinishTime
			return fa != nil && (fb == nil || fa.Before(fb))
		})
	}
	byFinish(passed)
	byFinish(ended)
	trimmed := map[int]bool{}
	for _, pass := range []struct {
		nodes []int
		cut   func(*v1alpha1.NodeStatus)
	}{{passed, trimVerdict}, {passed, trimTimes}, {inFlight, trimRows}, {inFlight, trimControls}, {inFlight, trimBaseline}, {ended, trimRows}, {ended, trimVerdict}} {
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
		j.Rows, j.PodAges = nil, nil
		n.Judgement = &j
	}
}

func trimControls(n *v1alpha1.NodeStatus) { n.Controls = "" }

func trimBaseline(n *v1alpha1.NodeStatus) { n.Baseline, n.Controls = "", "" }

func jsonSize(v any) int {
	data, err := json.Marshal(v)
	if err != nil {
		return 0
	}
	return len(data)
}
