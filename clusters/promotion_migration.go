package clusters

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// WantMigration is what a RevisionMigration asks of an upstream cluster
// before it starts: a RevisionMigration there that moved namespaces to the
// same istiod version and Succeeded at least SoakAfter ago, gated at least
// as strictly as Spec gates. The version, not the revision's name, is the
// match: revision names differ per cluster.
type WantMigration struct {
	// ToVersion is the istiod version of the migration's spec.to (its
	// image tag, as status.toVersion records it).
	ToVersion string
	SoakAfter time.Duration
	// Spec is the migration's own spec, whose gates an upstream migration
	// must match or exceed (StricterMigration).
	Spec v1alpha1.RevisionMigrationSpec
}

// PromotedMigration reads upstream cluster c and says what is missing
// there, naming the cluster, or "" when the migration may start: a
// RevisionMigration in c to the wanted istiod version (status.toVersion)
// Succeeded at least SoakAfter before now, gated at least as strictly, and
// no RevisionMigration to that version Halted or Refused in c. A cluster
// that cannot be read is missing everything (fail closed), with its error.
func PromotedMigration(ctx context.Context, c Cluster, w WantMigration, now time.Time) string {
	nw, lack := upstreamClient(ctx, c)
	if lack != "" {
		return lack
	}
	list, err := nw.RevisionMigrations().List(ctx, metav1.ListOptions{})
	if err != nil {
		return cannotRead(ctx, c.Name, err)
	}
	return decideMigration(c.Name, list.Items, w, now)
}

// decideMigration is PromotedMigration's decision over the upstream
// cluster's migrations.
func decideMigration(cluster string, migrations []v1alpha1.RevisionMigration, w WantMigration, now time.Time) string {
	var ev []evidence
	for _, rm := range migrations {
		if rm.Status.ToVersion != w.ToVersion {
			continue
		}
		e := evidence{name: "RevisionMigration " + rm.Name}
		switch rm.Status.Phase {
		case v1alpha1.MigrationHalted, v1alpha1.MigrationRefused:
			e.blocks, e.reason = string(rm.Status.Phase), rm.Status.Reason
		case v1alpha1.MigrationSucceeded:
			if rm.Status.CompletedAt != nil {
				e.doneAt, e.lenient = rm.Status.CompletedAt, StricterMigration(rm.Spec, w.Spec)
			}
		}
		ev = append(ev, e)
	}
	return verdict(cluster, ev, w.SoakAfter, now, terms{
		of: "to " + w.ToVersion, did: "succeeded to " + w.ToVersion,
		none: "no RevisionMigration has succeeded to istiod version " + w.ToVersion,
	})
}

// StricterMigration says how upstream's gates are more lenient than ours,
// or "" when they are as strict or stricter: Prometheus gates kept when
// ours has them; each built-in gate (config acceptance, retries) kept when
// ours keeps it, holding a wave at least as long (builtIn.soak) and, for
// the retry gate, with a baseline at least as long; and each query of ours
// run there too (by name), its noData at least as harsh (Pass <
// Inconclusive < Fail). Thresholds are not compared: each cluster's
// Prometheus has its own scale.
func StricterMigration(upstream, ours v1alpha1.RevisionMigrationSpec) string {
	o, u := prometheusOf(ours.Gates), prometheusOf(upstream.Gates)
	switch {
	case o == nil:
		return ""
	case u == nil:
		return "no Prometheus gates"
	}
	var why []string
	oNACK, oRetries := builtIns(o)
	uNACK, uRetries := builtIns(u)
	if oNACK && !uNACK {
		why = append(why, "no config-acceptance gate")
	}
	if oRetries && !uRetries {
		why = append(why, "no retry gate")
	}
	uSoak, uBase := builtInWindows(u)
	oSoak, oBase := builtInWindows(o)
	if (oNACK || oRetries) && (uNACK || uRetries) && uSoak < oSoak {
		why = append(why, fmt.Sprintf("builtIn.soak %s < %s", uSoak, oSoak))
	}
	if oRetries && uRetries && uBase < oBase {
		why = append(why, fmt.Sprintf("builtIn.baseline %s < %s", uBase, oBase))
	}
	for _, q := range o.Queries {
		i := slices.IndexFunc(u.Queries, func(x v1alpha1.PrometheusQuery) bool { return x.Name == q.Name })
		if i < 0 {
			why = append(why, fmt.Sprintf("query %s not run", q.Name))
			continue
		}
		if un, on := noData(u, u.Queries[i]), noData(o, q); noDataRank(un) < noDataRank(on) {
			why = append(why, fmt.Sprintf("query %s noData %s, ours %s", q.Name, un, on))
		}
	}
	return strings.Join(why, ", ")
}

func prometheusOf(g *v1alpha1.GatesSpec) *v1alpha1.PrometheusGates {
	if g == nil {
		return nil
	}
	return g.Prometheus
}

// builtIns says which built-in gates run: both unless turned off, as the
// revisions controller reads builtIn.
func builtIns(p *v1alpha1.PrometheusGates) (nack, retries bool) {
	b := p.BuiltIn
	if b == nil {
		return true, true
	}
	return !b.Disabled && !b.ConfigAcceptance.Disabled, !b.Disabled && !b.Retries.Disabled
}

// builtInWindows are builtIn.soak and builtIn.baseline, defaulted.
func builtInWindows(p *v1alpha1.PrometheusGates) (soak, baseline time.Duration) {
	soak, baseline = v1alpha1.DefaultBuiltInSoak, v1alpha1.DefaultBuiltInBaseline
	if b := p.BuiltIn; b != nil {
		if b.Soak != nil {
			soak = b.Soak.Duration
		}
		if b.Baseline != nil {
			baseline = b.Baseline.Duration
		}
	}
	return soak, baseline
}

// noData is what a query that returns nothing means for q: its own
// policy, else the gates', else Inconclusive.
func noData(p *v1alpha1.PrometheusGates, q v1alpha1.PrometheusQuery) v1alpha1.NoDataPolicy {
	switch {
	case q.NoData != "":
		return q.NoData
	case p.NoData != "":
		return p.NoData
	}
	return v1alpha1.NoDataInconclusive
}

func noDataRank(p v1alpha1.NoDataPolicy) int {
	return slices.Index([]v1alpha1.NoDataPolicy{v1alpha1.NoDataPass, v1alpha1.NoDataInconclusive, v1alpha1.NoDataFail}, p)
}
