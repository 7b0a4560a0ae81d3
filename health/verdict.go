package health

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// Outcome is the judge's decision for one node (or one gate): the API's
// outcome, persisted as status.nodes[].judgement.intervalOutcome.
type Outcome = v1alpha1.Outcome

const (
	Pass         = v1alpha1.OutcomePass
	Fail         = v1alpha1.OutcomeFail
	Inconclusive = v1alpha1.OutcomeInconclusive
)

// HeadlineMax bounds a headline, in characters: one line a person paged at
// night reads whole.
const HeadlineMax = 160

// Verdict is a gate's decision: a headline a person reads first, and the
// reasons behind it, which status, events and the CLI keep as detail.
type Verdict struct {
	Outcome Outcome `json:"outcome"`
	// Headline is one line naming the worst failing evidence first, such as
	// "probe: resets sent 0/s → 3.1/s (p<0.001)", or saying plainly why the
	// node passed or is held; at most HeadlineMax characters. Passing
	// checks, clock notes and file paths never lead. Empty: the first
	// reason leads (Line).
	Headline string `json:"headline,omitempty"`
	// Reasons are short sentences such as
	// "pod shop/cart-7d9: resets received 0.2/s → 3.1/s, p<0.001": every
	// finding behind the outcome, the headline's among them.
	Reasons []string `json:"reasons,omitempty"`
	// Summary holds the numbers behind the outcome, persisted as is in the
	// node's entry in NodeRollout status (status.nodes[].judgement). It is
	// nil for gates that have no numbers.
	Summary *v1alpha1.NodeJudgement `json:"summary,omitempty"`
}

// Line is the verdict in one line, its outcome then its headline:
// "Fail: probe: resets sent 0/s → 3.1/s (p<0.001)". A gate that set no
// headline leads with its first reason (Lead).
func (v Verdict) Line() string {
	h := v.Headline
	if h == "" {
		h = Lead(v.Reasons)
	}
	if h == "" {
		return string(v.Outcome)
	}
	return string(v.Outcome) + ": " + h
}

// Lead is a headline made of findings of one kind: the first, cut to
// HeadlineMax, and how many more follow ("… (+2 more)").
func Lead(findings []string) string {
	if len(findings) == 0 {
		return ""
	}
	more := ""
	if len(findings) > 1 {
		more = fmt.Sprintf(" (+%d more)", len(findings)-1)
	}
	return Cut(firstLine(findings[0]), HeadlineMax-utf8.RuneCountInString(more)) + more
}

// Cut shortens s to at most n characters, ending it with "…" when it cut.
func Cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	if n < 1 {
		return ""
	}
	r := []rune(s)[:n-1]
	return strings.TrimRight(string(r), " ;,:") + "…"
}

// firstLine is s up to its first line break.
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
