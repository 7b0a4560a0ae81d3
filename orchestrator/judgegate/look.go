package judgegate

import (
	"context"
	"time"

	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/health/gatespec"
	"github.com/nodewise/nodewise/orchestrator/gate"
)

var _ gate.Looker = (*Gate)(nil)

// Look implements gate.Looker: the judge's look at the node's soak so far
// (health.Judge.Look, the sequential method), on the Recorder's samples
// with the control group, as Judge judges. Whatever keeps it from judging
// (the fixed method, no baseline, a record that cannot be read, an agent
// that does not answer) decides nothing: the judgement at the soak's end
// decides, and fails such a node closed with its reason.
func (g *Gate) Look(ctx context.Context, in gate.GateInput, elapsed time.Duration) (health.Verdict, bool, error) {
	cfg, err := gatespec.Config(in.Spec)
	if err != nil || !cfg.Sequential || !in.SwapStart.After(in.BaselineStart) {
		return health.Verdict{}, false, nil
	}
	restored, err := g.restore(in.Node, in.BaselineStart, in.SwapStart, in.Record)
	if err != nil {
		return health.Verdict{}, false, nil
	}
	var controlsNote string
	if !cfg.NoControlGroup {
		controlsNote = g.restoreControls(in.Node, in.Control, in.BaselineStart, in.SwapStart, in.Controls)
	}
	if err := g.cfg.Recorder.Sample(ctx, in.Node); err != nil {
		return health.Verdict{}, false, nil
	}
	baseline, soakStart, err := g.cfg.Recorder.Windows(in.Node, in.BaselineStart, in.SwapStart, in.SoakStart)
	if err != nil {
		return health.Verdict{}, false, nil
	}
	var control []health.ControlNode
	var dropped []string
	if !cfg.NoControlGroup {
		control, dropped = g.controls(ctx, in)
	}
	v, decided, err := g.cfg.Judge.Look(ctx, health.Input{
		Node: in.Node, Gates: cfg, Baseline: baseline, SoakStart: soakStart,
		DrainDeadline: health.DrainDeadline(in.ZtunnelGrace),
		Control:       control, ControlScope: in.ControlScope, ControlsLeftOut: len(dropped),
		Soak: in.Soak,
	}, elapsed)
	if err != nil || !decided {
		return v, false, err
	}
	if restored != nil {
		v.Reasons = append(v.Reasons, restoredReason(*restored))
	} else if src := g.cfg.Recorder.BaselineSource(in.Node, in.BaselineStart, in.SwapStart); src != "" {
		v.Reasons = append(v.Reasons, src)
	}
	if controlsNote != "" {
		v.Reasons = append(v.Reasons, controlsNote)
	}
	v.Reasons = append(append(v.Reasons, dropped...), g.clockReasons(in)...)
	stampWindows(v.Summary, in, control)
	g.Done(in.Node)
	return v, true, nil
}
