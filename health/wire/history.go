package wire

import (
	"errors"
	"time"
)

// History is what a node agent serves at /v1/history: the snapshots it took
// every Every since its counters started (StartTime), oldest first, kept for
// Keep (or fewer, within the agent's memory bound). Two of them subtract to
// a window like any two snapshots, so the judge's "before" of a node can be
// read from it when the node's slot starts instead of being waited out.
//
// Every snapshot in it has the agent's StartTime: the counters reset when
// the agent restarts, and so does its history, which then starts at the
// restart. Now is the agent's clock when it answered, for placing the
// snapshots on the orchestrator's clock.
type History struct {
	Node      string        `json:"node"`
	StartTime time.Time     `json:"startTime"`
	Now       time.Time     `json:"now"`
	Every     time.Duration `json:"every"`
	Keep      time.Duration `json:"keep"`
	Snapshots []Snapshot    `json:"snapshots"`
}

// ErrNoHistory is wrapped by HistorySource.History when the agent keeps no
// history (an older agent): the baseline is then waited out, as before.
var ErrNoHistory = errors.New("node agent serves no history")
