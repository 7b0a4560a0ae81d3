package health

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// TestSummaryKeepsTheNumbers: the persisted rows carry the numbers behind
// their formatted text (the dashboard draws them after the agents have
// moved on), and a row's numbers stay small.
func TestSummaryKeepsTheNumbers(t *testing.T) {
	j, in, _ := judgeScenario(t, 1, injectResets)
	v := mustJudge(t, j, in)
	var regressed *v1alpha1.JudgementRow
	for i, r := range v.Summary.Rows {
		if r.Values == nil {
			t.Fatalf("row %d (%s %s) has no values", i, r.Pod, r.Metric)
		}
		if r.Regressed && r.Pod != "" && regressed == nil {
			regressed = &v.Summary.Rows[i]
		}
	}
	if regressed == nil {
		t.Fatalf("no regressed pod row in %+v", v.Summary.Rows)
	}
	vals := regressed.Values
	before, err1 := strconv.ParseFloat(vals.Before, 64)
	after, err2 := strconv.ParseFloat(vals.After, 64)
	p, err3 := strconv.ParseFloat(vals.PAdj, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		t.Fatalf("values are not numbers: %+v", vals)
	}
	if after <= before || p > 0.05 || vals.NAfter == 0 {
		t.Errorf("regressed row %s %s: before %g after %g p %g n %d; want a significant rise", regressed.Pod, regressed.Metric, before, after, p, vals.NAfter)
	}
	if FormatRate(after)+"/s" != regressed.After {
		t.Errorf("after %g formats as %q, the row says %q", after, FormatRate(after)+"/s", regressed.After)
	}
	if in.Control != nil && vals.ControlShift == "" {
		t.Errorf("a row judged with a control group has no control shift: %+v", vals)
	}
	b, _ := json.Marshal(vals)
	if len(b) > 200 {
		t.Errorf("a row's values are %d bytes of JSON (%s); the status budget counts on under 200", len(b), b)
	}
}
