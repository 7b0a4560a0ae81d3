package health

import (
	"strconv"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/wire"
)

// podAges are the connection ages before → after of the pods that have a
// row in sum, in the order of their first row: before from the baseline's
// last snapshot (just before the swap), after from the soak's last. A pod
// missing from a snapshot has no connections in it. At most
// MaxSummaryPodRows pods, since the rows hold no more.
func podAges(sum *v1alpha1.NodeJudgement, before, after wire.Snapshot) []v1alpha1.PodAges {
	ages := func(s wire.Snapshot) map[string][]uint64 {
		m := make(map[string][]uint64, len(s.Pods))
		for i := range s.Pods {
			m[KeyOf(&s.Pods[i]).String()] = s.Pods[i].ConnAges
		}
		return m
	}
	b, a := ages(before), ages(after)
	var out []v1alpha1.PodAges
	seen := map[string]bool{}
	for _, r := range sum.Rows {
		if r.Pod == "" || seen[r.Pod] || len(out) == MaxSummaryPodRows {
			continue
		}
		seen[r.Pod] = true
		out = append(out, v1alpha1.PodAges{Pod: r.Pod, Before: summarizeAges(b[r.Pod]), After: summarizeAges(a[r.Pod])})
	}
	return out
}

// summarizeAges is a connection-age histogram as the status keeps it: the
// count, and the lower bounds of the median's and the oldest's buckets.
func summarizeAges(h []uint64) v1alpha1.ConnAges {
	var total uint64
	for _, n := range h {
		total += n
	}
	out := v1alpha1.ConnAges{Open: int64(total)}
	if total == 0 {
		return out
	}
	lower := func(i int) string {
		if i == 0 {
			return "0"
		}
		return strconv.FormatFloat(wire.AgeBucketBoundsSeconds[min(i, len(wire.AgeBucketBoundsSeconds))-1], 'g', -1, 64)
	}
	var cum uint64
	for i, n := range h {
		cum += n
		if out.Median == "" && 2*cum >= total {
			out.Median = lower(i)
		}
		if n > 0 {
			out.Oldest = lower(i)
		}
	}
	return out
}
