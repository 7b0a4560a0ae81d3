package health

// Outcome is the judge's decision for one node (or one gate).
type Outcome string

const (
	Pass         Outcome = "Pass"
	Fail         Outcome = "Fail"
	Inconclusive Outcome = "Inconclusive"
)

// Verdict is a gate's decision with the reasons a person reads in status and events.
type Verdict struct {
	Outcome Outcome `json:"outcome"`
	// Reasons are short sentences such as
	// "pod shop/cart-7d9: resets received 0.2/s → 3.1/s, p<0.001".
	Reasons []string `json:"reasons,omitempty"`
	// Summary holds the numbers behind the outcome, small enough to persist
	// in the node's entry in NodeRollout.status (see Summary). It is nil for
	// gates that have no numbers.
	Summary *Summary `json:"summary,omitempty"`
}
