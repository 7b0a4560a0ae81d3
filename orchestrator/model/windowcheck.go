package model

import (
	"fmt"
	"time"
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
			if at, ok := firstOverlap(p.Windows[i], p.Windows[j], now); ok {
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

// firstOverlap is the first instant from now on at which a and b are both
// open, looking a week ahead (every weekday of each window).
func firstOverlap(a, b Window, now time.Time) (time.Time, bool) {
	var first time.Time
	a.spans(now, func(aOpen, aClose time.Time) bool {
		b.spans(now, func(bOpen, bClose time.Time) bool {
			from, to := later(aOpen, bOpen), earlier(aClose, bClose)
			if from.Before(to) && to.After(now) && (first.IsZero() || from.Before(first)) {
				first = later(from, now)
			}
			return true
		})
		return true
	})
	return first, !first.IsZero()
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
