package podage

import (
	"fmt"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio/freshness"
	"github.com/nodewise/nodewise/orchestrator/timewindow"
)

// policy is a PodAgePolicy's spec, parsed and defaulted.
type policy struct {
	maxAge          time.Duration // 0: no age target
	maxMinorsBehind int           // noLag: no version target
	notice          time.Duration
	windows         []timewindow.Window
	blackouts       []timewindow.Blackout
	waveSize        int
	keys            freshness.Keys
}

// noLag stands for an unset maxMinorsBehind: no proxy is that far behind.
const noLag = 1 << 20

// DefaultNotice is how long before a restart its owners are told when the
// policy does not say.
const DefaultNotice = 72 * time.Hour

// parse validates and defaults a spec; an error names the field.
func parse(s v1alpha1.PodAgePolicySpec) (policy, error) {
	p := policy{maxMinorsBehind: noLag, notice: DefaultNotice, waveSize: 5, keys: freshness.Keys{Team: s.TeamKey, Owner: s.OwnerKey}}
	if s.MaxAge != nil {
		if err := s.MaxAge.Err(); err != nil {
			return p, fmt.Errorf("spec.maxAge: %w", err)
		}
		p.maxAge = s.MaxAge.Duration
	}
	if s.MaxMinorsBehind != nil {
		p.maxMinorsBehind = int(*s.MaxMinorsBehind)
	}
	if p.maxAge <= 0 && s.MaxMinorsBehind == nil {
		return p, fmt.Errorf("spec: set maxAge, maxMinorsBehind or both: a policy needs a target")
	}
	if s.Notice != nil {
		if err := s.Notice.Err(); err != nil {
			return p, fmt.Errorf("spec.notice: %w", err)
		}
		p.notice = s.Notice.Duration
	}
	if s.WaveSize > 0 {
		p.waveSize = int(s.WaveSize)
	}
	if s.RateLimit.PodsPerSecond <= 0 {
		return p, fmt.Errorf("spec.rateLimit.podsPerSecond must be greater than 0")
	}
	for i, w := range s.MaintenanceWindows {
		win, err := timewindow.ParseWindow(w)
		if err != nil {
			return p, fmt.Errorf("spec.maintenanceWindows[%d]: %w", i, err)
		}
		p.windows = append(p.windows, win)
	}
	for i, b := range s.Blackouts {
		bo, err := timewindow.ParseBlackout(b)
		if err != nil {
			return p, fmt.Errorf("spec.blackouts[%d]: %w", i, err)
		}
		p.blackouts = append(p.blackouts, bo)
	}
	return p, nil
}

// open says whether restarts may start at now, and if not, when they next
// may (zero when no window ever opens).
func (p policy) open(now time.Time) (bool, time.Time) {
	t := now
	// Each blackout or closed window moves t forward; a few hops find the
	// first open instant when there is one.
	for range 64 {
		moved := false
		if !timewindow.InAnyWindow(p.windows, t) {
			next, ok := timewindow.NextWindowOpen(p.windows, t)
			if !ok {
				return false, time.Time{}
			}
			t, moved = next, true
		}
		for _, b := range p.blackouts {
			if !t.Before(b.Start) && t.Before(b.End) {
				t, moved = b.End, true
			}
		}
		if !moved {
			return t.Equal(now), t
		}
	}
	return false, time.Time{}
}

// Windows is the policy's windows as written, for people ("Mon-Fri
// 22:00–04:00 Europe/Berlin"); "any time" when there are none.
func (p policy) Windows() string {
	if len(p.windows) == 0 {
		return "any time"
	}
	var out []string
	for _, w := range p.windows {
		out = append(out, w.String())
	}
	return strings.Join(out, "; ")
}

// candidate is a workload that misses the policy's target.
type candidate struct {
	namespace, kind, name string
	team, owner, why      string
	pods                  int
	optOut                *metav1.Time
}

func (c candidate) key() string { return c.kind + " " + c.namespace + "/" + c.name }

// candidates are the report's workloads that miss the target, in the
// covered namespaces, sorted by namespace, kind and name. It is pure.
func candidates(r freshness.Report, p policy, covered func(ns string) bool) []candidate {
	var out []candidate
	for _, w := range r.Workloads {
		if !covered(w.Namespace) {
			continue
		}
		var why []string
		if p.maxAge > 0 && w.OverAge > 0 {
			why = append(why, fmt.Sprintf("%d of %d pods older than %s (oldest %s)", w.OverAge, w.Pods, freshness.Human(p.maxAge), freshness.Human(r.Now.Sub(w.OldestPod.Time))))
		}
		// A pinned workload's restart keeps the old proxy: only a migration helps.
		if w.Lagging > 0 && w.Pinned == "" {
			why = append(why, fmt.Sprintf("proxy %s is %d minors behind %s (max %d)", w.OldestVersion, w.MinorsBehind, r.Version, p.maxMinorsBehind))
		}
		if len(why) == 0 {
			continue
		}
		out = append(out, candidate{namespace: w.Namespace, kind: w.Kind, name: w.Name, team: w.Team, owner: w.Owner, why: strings.Join(why, "; "), pods: w.Pods, optOut: w.OptedOutUntil})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key() < out[j].key() })
	return out
}

// recordKey is a status record's candidate key.
func recordKey(w v1alpha1.PodAgeWorkload) string { return w.Kind + " " + w.Namespace + "/" + w.Name }

// merge brings the status records in line with the candidates: a workload
// that no longer misses the target leaves, unless it is in the last wave
// (restarting, or restarted: the record of what that wave did); a live
// opt-out is recorded, and an expired one no longer protects; a workload
// restarted in an earlier wave that misses the target again starts over
// with a new notice. It returns the records and the candidates that need a
// notice. It is pure.
func merge(records []v1alpha1.PodAgeWorkload, cands []candidate, wave int32) ([]v1alpha1.PodAgeWorkload, []candidate) {
	byKey := map[string]int{}
	for i, r := range records {
		byKey[recordKey(r)] = i
	}
	seen := map[string]bool{}
	var out []v1alpha1.PodAgeWorkload
	var notice []candidate
	for _, c := range cands {
		seen[c.key()] = true
		i, ok := byKey[c.key()]
		var r v1alpha1.PodAgeWorkload
		if ok {
			r = records[i]
		} else {
			r = v1alpha1.PodAgeWorkload{Namespace: c.namespace, Kind: c.kind, Name: c.name}
		}
		r.Team, r.Owner, r.Why = c.team, c.owner, c.why
		if r.State == v1alpha1.WorkloadRestarted && r.Wave != wave {
			r = v1alpha1.PodAgeWorkload{Namespace: c.namespace, Kind: c.kind, Name: c.name, Team: c.team, Owner: c.owner, Why: c.why}
		}
		switch {
		case r.State == v1alpha1.WorkloadRestarting || r.State == v1alpha1.WorkloadRestarted:
			// In the hands of the last wave: never restarted twice for one notice.
		case c.optOut != nil:
			r.State, r.OptOutUntil, r.Message = v1alpha1.WorkloadOptedOut, c.optOut, "opted out until "+c.optOut.UTC().Format(time.RFC3339)
		case r.NoticeSentAt == nil:
			notice = append(notice, c)
			continue
		case r.State == v1alpha1.WorkloadOptedOut:
			r.State, r.OptOutUntil, r.Message = v1alpha1.WorkloadNoticed, nil, "its opt-out expired"
		}
		out = append(out, r)
	}
	for _, r := range records {
		if !seen[recordKey(r)] && (r.State == v1alpha1.WorkloadRestarting || r.State == v1alpha1.WorkloadRestarted && r.Wave == wave) {
			out = append(out, r)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return recordKey(out[i]) < recordKey(out[j]) })
	return out, notice
}

// eligible are the records whose notice has run out by now and that are not
// restarted or opted out, at most n. It is pure.
func eligible(records []v1alpha1.PodAgeWorkload, notice time.Duration, now time.Time) []int {
	var out []int
	for i, r := range records {
		if r.State != v1alpha1.WorkloadNoticed && r.State != v1alpha1.WorkloadBlocked {
			continue
		}
		if r.NoticeSentAt == nil || now.Before(r.NoticeSentAt.Add(notice)) {
			continue
		}
		out = append(out, i)
	}
	return out
}
