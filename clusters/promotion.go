package clusters

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// Want is what a rollout asks of an upstream cluster before it starts: a
// NodeRollout there that rolled the same images to Completed at least
// SoakAfter ago, judged at least as strictly as Spec judges.
type Want struct {
	// Images are the rollout's target images, all of them.
	Images    []string
	SoakAfter time.Duration
	// Spec is the rollout's own spec, whose judge an upstream rollout must
	// match or exceed (Stricter).
	Spec v1alpha1.NodeRolloutSpec
}

// Promoted reads upstream cluster c and says what is missing there, naming
// the cluster, or "" when the rollout may start: a NodeRollout in c
// Completed with every one of the wanted images at least SoakAfter before
// now, judged at least as strictly, and no NodeRollout of any of those
// images Halted or Failed in c. A cluster that cannot be read is missing
// everything (fail closed), with its error.
func Promoted(ctx context.Context, c Cluster, w Want, now time.Time) string {
	nw, lack := upstreamClient(ctx, c)
	if lack != "" {
		return lack
	}
	list, err := nw.NodeRollouts().List(ctx, metav1.ListOptions{})
	if err != nil {
		return cannotRead(ctx, c.Name, err)
	}
	return decide(c.Name, list.Items, w, now)
}

// upstreamClient is the nodewise client of c, or what c lacks (everything,
// with the error) when it has none.
func upstreamClient(ctx context.Context, c Cluster) (*v1alpha1.Client, string) {
	if c.Err != nil {
		return nil, cannotRead(ctx, c.Name, c.Err)
	}
	nw, err := v1alpha1.NewForConfig(c.Config)
	if err != nil {
		return nil, cannotRead(ctx, c.Name, err)
	}
	return nw, ""
}

func cannotRead(ctx context.Context, cluster string, err error) string {
	return fmt.Sprintf("cannot read upstream %s: %s", cluster, oneLine(ctx, err, 0))
}

// decide is Promoted's decision over the upstream cluster's rollouts.
func decide(cluster string, rollouts []v1alpha1.NodeRollout, w Want, now time.Time) string {
	var ev []evidence
	for _, nr := range rollouts {
		images := statusImages(nr.Status)
		if !overlaps(images, w.Images) {
			continue
		}
		e := evidence{name: "NodeRollout " + nr.Name}
		switch nr.Status.Phase {
		case v1alpha1.PhaseHalted, v1alpha1.PhaseFailed:
			e.blocks, e.reason = string(nr.Status.Phase), nr.Status.PhaseReason()
		case v1alpha1.PhaseCompleted, v1alpha1.PhaseIdle: // Idle: a standing policy whose run completed
			if covers(images, w.Images) && nr.Status.CompletionTime != nil {
				e.doneAt, e.lenient = nr.Status.CompletionTime, Stricter(nr.Spec, w.Spec)
			}
		}
		ev = append(ev, e)
	}
	return verdict(cluster, ev, w.SoakAfter, now, terms{
		of: "of these images", did: "completed these images",
		none: "no NodeRollout has completed images " + strings.Join(w.Images, ", "),
	})
}

// evidence is one upstream object that concerns the wanted target.
type evidence struct {
	name string // kind and name
	// blocks is its phase when that keeps every downstream waiting
	// (Halted, Failed, Refused), with the reason; "" otherwise.
	blocks, reason string
	// doneAt is when it finished the whole wanted target (nil: it has not),
	// and lenient how it was judged more leniently ("": as strictly).
	doneAt  *metav1.Time
	lenient string
}

// terms word verdict's reasons for one kind of object.
type terms struct {
	of   string // how an object relates to the target: "of these images"
	did  string // what a finished one did: "completed these images"
	none string // the reason when none did
}

// verdict is what an upstream cluster lacks given the evidence of its
// objects, or "": one of them finished at least soakAfter before now,
// judged as strictly, and none blocks. When several finished, the earliest
// qualifying one counts.
func verdict(cluster string, ev []evidence, soakAfter time.Duration, now time.Time, t terms) string {
	var best *evidence
	var weaker []string
	for i := range ev {
		e := &ev[i]
		switch {
		case e.blocks != "":
			return fmt.Sprintf("upstream %s: %s %s is %s (%s)", cluster, e.name, t.of, e.blocks, firstLine(e.reason))
		case e.doneAt == nil:
		case e.lenient != "":
			weaker = append(weaker, fmt.Sprintf("%s was judged more leniently (%s)", e.name, e.lenient))
		case best == nil || e.doneAt.Before(best.doneAt):
			best = e
		}
	}
	switch {
	case best != nil && now.Sub(best.doneAt.Time) >= soakAfter:
		return ""
	case best != nil:
		at := best.doneAt.Time
		return fmt.Sprintf("upstream %s: %s %s %s ago; promotion waits until %s (soakAfter %s)",
			cluster, best.name, t.did, duration.HumanDuration(now.Sub(at)), at.Add(soakAfter).UTC().Format(time.RFC3339), soakAfter)
	case len(weaker) > 0:
		return fmt.Sprintf("upstream %s: %s", cluster, strings.Join(weaker, "; "))
	}
	return fmt.Sprintf("upstream %s: %s", cluster, t.none)
}

// Stricter says how upstream's judge is more lenient than ours, or "" when
// it is as strict or stricter: a soak and a baseline at least as long, the
// control group kept when ours keeps it, and inconclusive nodes treated at
// least as harshly (Pass < Pause < Fail).
func Stricter(upstream, ours v1alpha1.NodeRolloutSpec) string {
	var why []string
	if u, o := dur(upstream.Soak), dur(ours.Soak); u < o {
		why = append(why, fmt.Sprintf("soak %s < %s", u, o))
	}
	if u, o := dur(upstream.Baseline), dur(ours.Baseline); u < o {
		why = append(why, fmt.Sprintf("baseline %s < %s", u, o))
	}
	if upstream.Gates.ControlGroup == v1alpha1.ControlGroupDisabled && ours.Gates.ControlGroup != v1alpha1.ControlGroupDisabled {
		why = append(why, "no control group")
	}
	if u, o := rank(upstream.Gates.Inconclusive), rank(ours.Gates.Inconclusive); u < o {
		why = append(why, fmt.Sprintf("inconclusive %s, ours %s", orDefault(upstream.Gates.Inconclusive), orDefault(ours.Gates.Inconclusive)))
	}
	return strings.Join(why, ", ")
}

// dur reads a spec duration; the API server defaults soak and baseline, so
// an absent one is compared as the CRD's default.
func dur(d *v1alpha1.Duration) time.Duration {
	if d == nil {
		return 5 * time.Minute
	}
	return d.Duration
}

// orDefault is an inconclusive policy as the judge reads it: empty is
// Pause, the judge's default (health.DefaultConfig).
func orDefault(p v1alpha1.InconclusivePolicy) v1alpha1.InconclusivePolicy {
	if p == "" {
		return v1alpha1.InconclusivePause
	}
	return p
}

func rank(p v1alpha1.InconclusivePolicy) int {
	return slices.Index([]v1alpha1.InconclusivePolicy{v1alpha1.InconclusivePass, v1alpha1.InconclusivePause, v1alpha1.InconclusiveFail}, orDefault(p))
}

// statusImages are the images a rollout moved its nodes to.
func statusImages(s v1alpha1.NodeRolloutStatus) []string {
	var out []string
	for _, t := range s.Targets {
		out = append(out, t.Images...)
	}
	return out
}

func overlaps(have, want []string) bool {
	return slices.ContainsFunc(want, func(i string) bool { return slices.Contains(have, i) })
}

func covers(have, want []string) bool {
	return !slices.ContainsFunc(want, func(i string) bool { return !slices.Contains(have, i) })
}
