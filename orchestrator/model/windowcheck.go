package model

import (
	"fmt"
	"time"

	"github.com/nodewise/nodewise/orchestrator/timewindow"
)

// Warnings are what is valid in a policy but likely a mistake, each naming
// its field: maintenance windows open at the same time in the week from now
// (a node may start in either, so they act as one: a wrong time or time zone,
// more often than not), and blackouts that ended before now (they hold
// nothing: a wrong year, more often than not).
func (p Policy) Warnings(now time.Time) []string {
	var out []string
	for i := range p.Windows {
		for j := i + 1; j < len(p.Windows); j++ {
			if at, ok := timewindow.FirstOverlap(p.Windows[i], p.Windows[j], now); ok {
				out = append(out, fmt.Sprintf("spec.maintenanceWindows[%d] and spec.maintenanceWindows[%d] overlap (%s; %s; both open at %s): a node may start in either, so check their times and time zones",
					i, j, p.Windows[i], p.Windows[j], at.UTC().Format(time.RFC3339)))
			}
		}
	}
	for i, b := range p.Blackouts {
		if !b.End.After(now) {
			reason := ""
			if b.Reason != "" {
				reason = " (" + b.Reason + ")"
			}
			out = append(out, fmt.Sprintf("spec.blackouts[%d]%s ended %s, in the past: it holds nothing; check its year", i, reason, b.End.UTC().Format(time.RFC3339)))
		}
	}
	return out
}
