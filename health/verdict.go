package health

import "github.com/nodewise/nodewise/api/v1alpha1"

// Outcome is the judge's decision for one node (or one gate): the API's
// outcome, persisted as status.nodes[].judgement.intervalOutcome.
type Outcome = v1alpha1.Outcome

const (
	Pass         = v1alpha1.OutcomePass
	Fail         = v1alpha1.OutcomeFail
	Inconclusive = v1alpha1.OutcomeInconclusive
)

// Verdict is a gate's decision with the reasons a person reads in status and events.
type Verdict struct {
	Outcome Outcome `json:"outcome"`
	// Reasons are short sentences such as
	// "pod shop/cart-7d9: resets received 0.2/s → 3.1/s, p<0.001".
	Reasons []string `json:"reasons,omitempty"`
	// Summary holds the numbers behind the outcome, persisted as is in the
	// node's entry in NodeRollout status (status.nodes[].judgement). It is
	// nil for gates that have no numbers.
	Summary *v1alpha1.NodeJudgement `json:"summary,omitempty"`
}
