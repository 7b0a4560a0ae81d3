package freshness

import (
	"fmt"
	"strings"
	"time"
)

// Line is a group's one-line answer, for a team lead: how many of its pods
// are behind, how old the oldest is, and when its proxies will be on the
// designated version without forcing.
func (r Report) Line(g Group) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: ", g.Name)
	switch {
	case g.Stale == 0:
		fmt.Fprintf(&b, "all %d pods on %s", g.Pods, r.Version)
	case g.MinorsBehind > 0:
		fmt.Fprintf(&b, "%d of %d pods behind %s (up to %d minor%s)", g.Stale, g.Pods, r.Version, g.MinorsBehind, plural(g.MinorsBehind))
	default:
		fmt.Fprintf(&b, "%d of %d pods behind %s (patches)", g.Stale, g.Pods, r.Version)
	}
	if g.OldestPod != nil {
		fmt.Fprintf(&b, "; the oldest pod is %s old", Human(r.Now.Sub(g.OldestPod.Time)))
	}
	if g.OverAge > 0 {
		fmt.Fprintf(&b, "; %d over the %s maximum age", g.OverAge, Human(r.MaxAge.Duration))
	}
	if g.OptedOut > 0 {
		fmt.Fprintf(&b, "; %d workload%s opted out of the maximum age", g.OptedOut, plural(g.OptedOut))
	}
	if g.Stale > 0 {
		b.WriteString("; " + r.exposure(g.Exposure))
	}
	return b.String()
}

// Summary is the fleet's one line: teams behind and the exposure window.
func (r Report) Summary() string {
	behind := 0
	for _, t := range r.Teams {
		if t.Stale > 0 {
			behind++
		}
	}
	s := fmt.Sprintf("freshness: %d of %d teams behind %s (%d of %d sidecar pods)", behind, len(r.Teams), r.Version, r.Fleet.Stale, r.Fleet.Pods)
	if r.Fleet.Stale > 0 {
		s += "; " + r.exposure(r.Fleet.Exposure)
	}
	if r.Nodes.StaleZtunnel+r.Nodes.StaleCNI > 0 {
		s += fmt.Sprintf("; ambient: %d of %d nodes behind", max(r.Nodes.StaleZtunnel, r.Nodes.StaleCNI), r.Nodes.Nodes)
	}
	if wp := r.Waypoints; wp.Stale > 0 {
		names := make([]string, 0, len(wp.Behind))
		for i, w := range wp.Behind {
			if i == 3 {
				names = append(names, fmt.Sprintf("%d more", len(wp.Behind)-i))
				break
			}
			names = append(names, w.Ref()+" "+w.Version)
		}
		s += fmt.Sprintf("; waypoints: %d of %d behind (%s)", wp.Stale, wp.Waypoints, strings.Join(names, ", "))
	}
	return s
}

// Next says when a workload's pods are expected to restart by themselves
// ("in 6d ±1d"), or why they never will.
func (r Report) Next(w Workload) string {
	switch {
	case w.Pinned != "":
		return "never: " + w.Pinned
	case w.NextRestart == nil && w.Stale > 0:
		age := "never restarted"
		if len(w.Restarts) > 0 {
			age = "last restarted " + Human(r.Now.Sub(w.Restarts[len(w.Restarts)-1].Time)) + " ago"
		}
		return "never expected: no restart cadence (" + age + ")"
	case w.NextRestart == nil:
		return "-"
	}
	s := "in " + Human(w.NextRestart.Sub(r.Now.Time))
	if w.Spread.Duration >= time.Second {
		s += " ±" + Human(w.Spread.Duration)
	}
	return s
}

func (r Report) exposure(e Exposure) string {
	var parts []string
	if e.Window.Duration > 0 || e.Never == 0 {
		s := "exposure window " + Human(e.Window.Duration)
		if e.Error.Duration >= time.Second {
			s += " ±" + Human(e.Error.Duration)
		}
		parts = append(parts, s)
	}
	if e.Never > 0 {
		parts = append(parts, fmt.Sprintf("%d workload%s never on %s without a forced restart or migration", e.Never, plural(e.Never), r.Version))
	}
	return strings.Join(parts, ", ")
}

// Human writes a span in the largest unit that keeps it readable: 45s, 12m,
// 5h, 61d.
func Human(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
