package health

import (
	"context"
	"testing"
	"time"

	"github.com/nodewise/nodewise/health/remote"
	"github.com/nodewise/nodewise/health/remote/agenttest"
)

// The judge over the real client: an agent that stops answering fails the node.
func TestJudgeFailsClosedWhenAgentStops(t *testing.T) {
	r := agenttest.New(t)
	c, err := remote.NewAgent(remote.AgentConfig{CAFile: r.CAFile, TokenFile: r.TokFile, URLFor: r.URLFor,
		RetryWaitMin: time.Millisecond, RetryWaitMax: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	j, err := NewJudge(JudgeConfig{Source: c})
	if err != nil {
		t.Fatal(err)
	}
	_, in, _ := judgeScenario(t, 1, nil)
	r.Srv.Close()
	v, err := j.Judge(context.Background(), in)
	if err != nil || v.Outcome != Fail || !hasReason(v, "did not answer") || !hasReason(v, "node agent unavailable") {
		t.Fatalf("agent stopped: %v %s %q", err, v.Outcome, v.Reasons)
	}
}
