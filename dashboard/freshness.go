package dashboard

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/istio/freshness"
	"github.com/nodewise/nodewise/istio/inventory"
)

// FreshnessConfig is how the /freshness page reads the cluster: with Client
// (the dashboard's credentials), against Target, teams and owners named by
// Keys, as `nodewise freshness` does.
type FreshnessConfig struct {
	Client  kubernetes.Interface
	Options inventory.Options
	Target  freshness.Target
	Keys    freshness.Keys
	// Tail is how many long-tail workloads the page lists (default 10).
	Tail int
	// Restarts, when set, says what the platform will do to each of the
	// given teams' workloads behind (its PodAgePolicies: how many, from
	// when, in which windows), by team; a team it leaves out gets no line.
	Restarts func(ctx context.Context, teams []string, now time.Time) (map[string]string, error)
}

// freshnessReads is what freshness.Observe lists, cluster-wide, for the
// message that says why a forbidden read left the page empty.
const freshnessReads = "pods, namespaces, deployments, replicasets, statefulsets, controllerrevisions and mutatingwebhookconfigurations"

// freshnessData is the /freshness page: each team's line and its workloads
// behind, the fleet's summary and the long tail, read on each load.
type freshnessData struct {
	ReadAt string
	// Error says why the cluster could not be read; the rest is empty then.
	Error   string
	Summary string
	Version string
	Target  string
	// Team is the ?team= filter ("" for every team); Unknown is set when
	// no team has that name, and All names the teams there are.
	Team    string
	Unknown bool
	All     []string
	Teams   []teamFreshness
	Tail    []workloadFreshness
}

// teamFreshness is one team: its lead's line, what the platform will
// restart and when, and its workloads behind.
type teamFreshness struct {
	Name, Line, Restart string
	Workloads           []workloadFreshness
}

// workloadFreshness is one workload's row.
type workloadFreshness struct {
	Namespace, Workload, Team, Owner string
	Stale, Pods                      int
	OldestVersion, OldestPod         string
	// Next is when its pods are expected to restart by themselves, or why
	// never; NextAt is that date ("" when none).
	Next, NextAt string
}

func (s *Server) freshnessPage(r *http.Request) (pageData, string, any, int) {
	pd := pageData{Title: "Freshness", Crumbs: []link{{"Freshness", ""}}}
	fc := s.cfg.Freshness
	d := freshnessData{ReadAt: s.cfg.Now().UTC().Format(time.RFC3339), Team: r.URL.Query().Get("team")}
	if d.Team != "" {
		pd.Crumbs = []link{{"Freshness", "/freshness"}, {"team " + d.Team, ""}}
	}
	rep, err := freshness.Observe(r.Context(), fc.Client, fc.Options, fc.Target, fc.Keys, s.cfg.Now())
	switch {
	case apierrors.IsForbidden(err):
		d.Error = "Forbidden: the dashboard's credentials may not read what freshness needs (" + firstLine(err.Error()) +
			"). It lists " + freshnessReads + " in every namespace."
		return pd, "freshness.html", d, http.StatusForbidden
	case err != nil:
		var status apierrors.APIStatus
		code := http.StatusOK // the cluster's state, such as no designated version
		if errors.As(err, &status) {
			code = http.StatusBadGateway
		}
		d.Error = "Freshness cannot be measured: " + firstLine(err.Error())
		return pd, "freshness.html", d, code
	}
	d.Summary, d.Version = rep.Summary(), rep.Version
	d.Target = "at most " + strconv.Itoa(rep.Target.MaxMinorsBehind) + " minor release"
	if rep.Target.MaxMinorsBehind != 1 {
		d.Target += "s"
	}
	d.Target += " behind " + rep.Version
	if rep.MaxAge.Duration > 0 {
		d.Target += ", pods younger than " + freshness.Human(rep.MaxAge.Duration)
	}
	byTeam := map[string][]workloadFreshness{}
	for _, w := range rep.Workloads {
		if w.Stale+w.OverAge > 0 {
			byTeam[w.Team] = append(byTeam[w.Team], row(rep, w))
		}
	}
	for _, g := range rep.Teams {
		d.All = append(d.All, g.Name)
		if d.Team != "" && g.Name != d.Team {
			continue
		}
		d.Teams = append(d.Teams, teamFreshness{Name: g.Name, Line: rep.Line(g), Workloads: byTeam[g.Name]})
	}
	if d.Team != "" && len(d.Teams) == 0 {
		d.Unknown = true
		return pd, "freshness.html", d, http.StatusNotFound
	}
	if fc.Restarts != nil {
		var names []string
		for _, t := range d.Teams {
			names = append(names, t.Name)
		}
		plan, err := fc.Restarts(r.Context(), names, s.cfg.Now())
		for i := range d.Teams {
			switch {
			case err != nil:
				d.Teams[i].Restart = "what the platform will restart cannot be read: " + firstLine(err.Error())
			default:
				d.Teams[i].Restart = plan[d.Teams[i].Name]
			}
		}
	}
	tail := fc.Tail
	if tail <= 0 {
		tail = 10
	}
	for _, w := range rep.LongTail(len(rep.Workloads)) {
		if len(d.Tail) == tail {
			break
		}
		if d.Team == "" || w.Team == d.Team {
			d.Tail = append(d.Tail, row(rep, w))
		}
	}
	return pd, "freshness.html", d, http.StatusOK
}

func row(rep freshness.Report, w freshness.Workload) workloadFreshness {
	x := workloadFreshness{Namespace: w.Namespace, Workload: w.Kind + " " + w.Name, Team: w.Team, Owner: w.Owner,
		Stale: w.Stale, Pods: w.Pods, OldestVersion: w.OldestVersion, OldestPod: "-", Next: rep.Next(w)}
	if w.OldestPod != nil {
		x.OldestPod = freshness.Human(rep.Now.Sub(w.OldestPod.Time))
	}
	if w.NextRestart != nil {
		x.NextAt = w.NextRestart.UTC().Format("2006-01-02")
	}
	return x
}
