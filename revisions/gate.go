package revisions

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
)

// ExternalGates judges a wave with the judge's external gates (for example
// health.PrometheusGate). Each gate's subject (what the node rollout calls
// the node, $node in a PromQL query) is a regular expression matching
// exactly the wave's namespaces, such as ^(shop|cart)$ quoted for PromQL: write
// queries like
//
//	sum(rate(istio_requests_total{destination_workload_namespace=~"$node",response_code=~"5.."}[5m]))
//
// Any failure fails the wave with the gate's reasons. A query that returns
// nothing (noData: Inconclusive) holds the wave, and so does a gate that
// cannot look (Inconclusive), and fails it after its
// MaxConsecutiveErrors errors in a row. The error counts live in memory: a
// restarted controller starts counting again, which only delays a failure.
func ExternalGates(gates ...health.ExternalGate) Gate {
	return &externalGates{gates: gates, errors: map[string]int{}}
}

type externalGates struct {
	gates  []health.ExternalGate
	mu     sync.Mutex
	errors map[string]int
}

// WaveSubject is the $node value a wave's gates see: an anchored regular
// expression matching exactly its namespaces.
func WaveSubject(namespaces []string) string {
	quoted := make([]string, len(namespaces))
	for i, ns := range namespaces {
		quoted[i] = regexp.QuoteMeta(ns)
	}
	return "^(" + strings.Join(quoted, "|") + ")$"
}

func (g *externalGates) Judge(ctx context.Context, in WaveInput) (health.Verdict, error) {
	subject := WaveSubject(in.Namespaces)
	var fails, holds []string
	for _, gate := range g.gates {
		key := in.Migration + "/" + in.Wave + "/" + gate.Name()
		found, err := gate.Check(ctx, subject)
		g.mu.Lock()
		if err != nil {
			g.errors[key]++
			n := g.errors[key]
			g.mu.Unlock()
			msg := fmt.Sprintf("%s: %v (%d of %d errors in a row)", gate.Name(), err, n, gate.MaxConsecutiveErrors())
			if n >= gate.MaxConsecutiveErrors() {
				fails = append(fails, msg)
			} else {
				holds = append(holds, msg)
			}
			continue
		}
		g.errors[key] = 0
		g.mu.Unlock()
		for _, f := range found.Failures {
			fails = append(fails, gate.Name()+": "+f)
		}
		for _, n := range found.NoData {
			holds = append(holds, gate.Name()+": "+n)
		}
	}
	switch {
	case len(fails) > 0:
		return health.Verdict{Outcome: health.Fail, Reasons: fails}, nil
	case len(holds) > 0:
		return health.Verdict{Outcome: health.Inconclusive, Reasons: holds}, nil
	}
	return health.Verdict{Outcome: health.Pass}, nil
}

// Gates combines gates: a wave fails when any fails (with every failing
// gate's reasons), is held when none fails and any holds or errs, and passes
// when all pass, with the passing gates' notes (such as a built-in gate that
// had no data) as its reasons. The gates' tables are joined into one Summary,
// in the order of the gates. The combination is a
// NodeTracker for the gates that are: an AgentGate inside it still samples
// each migration's nodes from before every wave.
func Gates(gates ...Gate) Gate { return combined(gates) }

type combined []Gate

func (gs combined) Track(ctx context.Context, nodes []string) {
	for _, g := range gs {
		if t, ok := g.(NodeTracker); ok {
			t.Track(ctx, nodes)
		}
	}
}

func (gs combined) Judge(ctx context.Context, in WaveInput) (health.Verdict, error) {
	var fails, holds, notes []string
	var summary *v1alpha1.NodeJudgement
	for _, g := range gs {
		v, err := g.Judge(ctx, in)
		if err != nil {
			holds = append(holds, "gate error: "+err.Error())
			continue
		}
		summary = joinSummaries(summary, v.Summary)
		switch v.Outcome {
		case health.Fail:
			fails = append(fails, v.Reasons...)
		case health.Inconclusive:
			holds = append(holds, v.Reasons...)
		default:
			notes = append(notes, v.Reasons...)
		}
	}
	switch {
	case len(fails) > 0:
		return health.Verdict{Outcome: health.Fail, Reasons: fails, Summary: summary}, nil
	case len(holds) > 0:
		return health.Verdict{Outcome: health.Inconclusive, Reasons: holds, Summary: summary}, nil
	}
	return health.Verdict{Outcome: health.Pass, Reasons: notes, Summary: summary}, nil
}

// joinSummaries appends b's rows and counts to a copy of a (either may be nil).
func joinSummaries(a, b *v1alpha1.NodeJudgement) *v1alpha1.NodeJudgement {
	switch {
	case b == nil:
		return a
	case a == nil:
		return b.DeepCopy()
	}
	out := a.DeepCopy()
	out.Rows = append(out.Rows, b.Rows...)
	out.Tests += b.Tests
	out.Regressions += b.Regressions
	if out.JudgedAt == "" {
		out.JudgedAt = b.JudgedAt
	}
	return out
}
