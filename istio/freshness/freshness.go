// Package freshness measures how far the mesh's proxies are from the version
// the platform designates, per workload, namespace and team, and estimates the
// exposure window: how long until every proxy runs that version if nothing is
// forced, from each workload's own restart history. It is pure: Observe reads
// the objects, Build computes.
package freshness

import (
	"fmt"
	"slices"
	"sort"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/istio/skew"
)

// Default keys of the team and owner, read from a workload's labels or
// annotations first, then its namespace's.
const (
	DefaultTeamKey  = "team"
	DefaultOwnerKey = "owner"
)

// NoTeam groups the workloads whose team no key names.
const NoTeam = "(none)"

// Keys name the label or annotation that carries a workload's team and owner.
type Keys struct {
	Team  string `json:"team"`
	Owner string `json:"owner"`
}

func (k Keys) withDefaults() Keys {
	if k.Team == "" {
		k.Team = DefaultTeamKey
	}
	if k.Owner == "" {
		k.Owner = DefaultOwnerKey
	}
	return k
}

// Target is what a fresh proxy is: at most MaxMinorsBehind minor releases
// behind Version, and (when MaxAge is set) in a pod younger than MaxAge.
type Target struct {
	// Version is the designated version; the zero value means the version of
	// the revision the default tag serves (else the newest ready revision).
	Version         skew.Version  `json:"-"`
	MaxMinorsBehind int           `json:"maxMinorsBehind"`
	MaxAge          time.Duration `json:"-"`
}

// Objects are what a report is built from. The inventory's objects must
// include every namespace and pod; ReplicaSets, StatefulSets, DaemonSets and
// ControllerRevisions give the workloads' owners and restart history.
type Objects struct {
	inventory.Objects
	ReplicaSets         []appsv1.ReplicaSet
	StatefulSets        []appsv1.StatefulSet
	DaemonSets          []appsv1.DaemonSet
	ControllerRevisions []appsv1.ControllerRevision
}

// Workload is one owner of sidecar pods (a Deployment, StatefulSet,
// DaemonSet, or a bare pod) and how fresh its proxies are.
type Workload struct {
	Namespace string `json:"namespace"`
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Team      string `json:"team"`
	Owner     string `json:"owner,omitempty"`
	Pods      int    `json:"pods"`
	// Stale pods run a proxy older than the designated version (any
	// release, patches too); Lagging ones are more than the target's
	// minors behind; OverAge ones are older than the target's maximum age.
	Stale   int `json:"stale"`
	Lagging int `json:"lagging"`
	OverAge int `json:"overAge"`
	// OldestVersion is the oldest proxy version among its pods, and
	// MinorsBehind how far that is behind the target.
	OldestVersion string       `json:"oldestVersion"`
	MinorsBehind  int          `json:"minorsBehind"`
	OldestPod     *metav1.Time `json:"oldestPod,omitempty"`
	// Restarts are the times its pods were last replaced together (its
	// ReplicaSets' or ControllerRevisions' creation), oldest first.
	Restarts []metav1.Time `json:"restarts,omitempty"`
	// Cadence is the median time between restarts. Spread is the next
	// restart's stated error: half the range of those intervals, for each
	// interval between the last restart and the next. Zero when fewer than
	// two restarts are known.
	Cadence metav1.Duration `json:"cadence,omitempty"`
	Spread  metav1.Duration `json:"spread,omitempty"`
	// NextRestart is when its pods are expected to be replaced by
	// themselves; nil when no cadence is known or a restart cannot bring
	// the designated version (Pinned says why).
	NextRestart *metav1.Time `json:"nextRestart,omitempty"`
	Pinned      string       `json:"pinned,omitempty"`
	// OptedOutUntil is when its max-age opt-out
	// (v1alpha1.AnnotationMaxAgeOptOutUntil) ends, while it protects.
	OptedOutUntil *metav1.Time `json:"optedOutUntil,omitempty"`
}

// Ref is "Deployment ns/name".
func (w Workload) Ref() string { return w.Kind + " " + w.Namespace + "/" + w.Name }

// Group is the freshness of a team's or a namespace's workloads.
type Group struct {
	Name         string       `json:"name"`
	Pods         int          `json:"pods"`
	Stale        int          `json:"stale"`
	Lagging      int          `json:"lagging"`
	OverAge      int          `json:"overAge"`
	MinorsBehind int          `json:"minorsBehind"`
	OldestPod    *metav1.Time `json:"oldestPod,omitempty"`
	Exposure     Exposure     `json:"exposure"`
	// OptedOut counts the workloads a live max-age opt-out protects.
	OptedOut int `json:"optedOut,omitempty"`
}

// Exposure is how long until every stale proxy of a group runs the
// designated version without forcing: the latest expected restart among its
// stale workloads. Never counts the stale workloads no restart is expected to
// fix (no restart history, or pinned to an old revision): the long tail.
type Exposure struct {
	Window metav1.Duration `json:"window"`
	Error  metav1.Duration `json:"error"`
	Never  int             `json:"never"`
}

// Nodes is the ambient data plane against the target: nodes whose ztunnel or
// istio-cni runs an older version than the designated one.
type Nodes struct {
	Nodes          int `json:"nodes"`
	StaleZtunnel   int `json:"staleZtunnel"`
	StaleCNI       int `json:"staleCNI"`
	LaggingNodes   int `json:"lagging"`
	AmbientPods    int `json:"ambientPods"`
	OverAgeAmbient int `json:"overAgeAmbient"`
}

// Waypoints is the ambient waypoints against the target, each waypoint
// counted once (by its oldest pod).
type Waypoints struct {
	Waypoints int `json:"waypoints"`
	Stale     int `json:"stale"`
	Lagging   int `json:"lagging"`
	// PerNamespace counts the waypoints of each namespace.
	PerNamespace map[string]int `json:"perNamespace,omitempty"`
	// Behind lists the stale waypoints.
	Behind []inventory.Waypoint `json:"behind,omitempty"`
}

// Report is one measurement of the mesh's freshness.
type Report struct {
	Now     metav1.Time     `json:"now"`
	Version string          `json:"version"`
	Target  Target          `json:"target"`
	MaxAge  metav1.Duration `json:"maxAge,omitempty"`
	Keys    Keys            `json:"keys"`
	// Fleet is every sidecar workload together; Teams and Namespaces split it.
	Fleet      Group      `json:"fleet"`
	Teams      []Group    `json:"teams"`
	Namespaces []Group    `json:"namespaces"`
	Nodes      Nodes      `json:"ambient"`
	Waypoints  Waypoints  `json:"waypoints"`
	Workloads  []Workload `json:"workloads"`
}

// LongTail returns the stale workloads that bound the exposure window: those
// never expected to restart by themselves first, then by latest expected
// restart; at most n.
func (r Report) LongTail(n int) []Workload {
	var out []Workload
	for _, w := range r.Workloads {
		if w.Stale > 0 {
			out = append(out, w)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i].NextRestart, out[j].NextRestart
		if (a == nil) != (b == nil) {
			return a == nil
		}
		if a != nil && !a.Equal(b) {
			return b.Before(a)
		}
		return out[i].Stale > out[j].Stale
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// Designated returns the version the target names, else the default tag's
// revision's version, else the newest ready revision's.
func Designated(inv inventory.Inventory, t Target) (skew.Version, error) {
	if t.Version != (skew.Version{}) {
		return t.Version, nil
	}
	if v, ok := inv.RevisionVersion("default"); ok && v != inventory.Unknown {
		return skew.ParseVersion(v)
	}
	var best *skew.Version
	for _, r := range inv.Revisions {
		v, err := skew.ParseVersion(r.Version)
		if err != nil || !r.Ready {
			continue
		}
		if best == nil || best.Less(v) {
			best = &v
		}
	}
	if best == nil {
		return skew.Version{}, fmt.Errorf("no designated version: no default tag and no ready istiod revision with a readable version; name one (--to)")
	}
	return *best, nil
}

// Build computes the report at now. It is pure.
func Build(opts inventory.Options, o Objects, t Target, keys Keys, now time.Time) (Report, error) {
	inv, err := inventory.Build(opts, o.Objects)
	if err != nil {
		return Report{}, err
	}
	target, err := Designated(inv, t)
	if err != nil {
		return Report{}, err
	}
	t.Version = target
	keys = keys.withDefaults()
	r := Report{Now: metav1.NewTime(now), Version: target.String(), Target: t, MaxAge: metav1.Duration{Duration: t.MaxAge}, Keys: keys}

	namespaces := map[string]*corev1.Namespace{}
	for i := range o.Namespaces {
		namespaces[o.Namespaces[i].Name] = &o.Namespaces[i]
	}
	revOf := map[string]string{}
	for _, ns := range inv.Namespaces {
		revOf[ns.Name] = ns.Revision
	}
	type podKey struct{ ns, name string }
	pods := make(map[podKey]*corev1.Pod, len(o.Pods))
	for i := range o.Pods {
		pods[podKey{o.Pods[i].Namespace, o.Pods[i].Name}] = &o.Pods[i]
	}
	h := newHistory(o)

	byRef := map[ref]*Workload{}
	var order []*Workload
	for _, ip := range inv.Pods {
		p := pods[podKey{ip.Namespace, ip.Name}]
		if p == nil {
			continue
		}
		overAge := t.MaxAge > 0 && now.Sub(p.CreationTimestamp.Time) > t.MaxAge
		if ip.Mode == inventory.ModeWaypoint {
			continue // istiod's, counted per waypoint below
		}
		if ip.Mode == inventory.ModeAmbient {
			r.Nodes.AmbientPods++
			if overAge {
				r.Nodes.OverAgeAmbient++
			}
			continue
		}
		k, meta := h.owner(p)
		w := byRef[k]
		if w == nil {
			w = &Workload{Namespace: p.Namespace, Kind: k.kind, Name: k.name}
			w.Team = pick(keys.Team, meta, namespaces[p.Namespace], NoTeam)
			w.Owner = pick(keys.Owner, meta, namespaces[p.Namespace], "")
			w.Restarts = h.revisions[k]
			w.OptedOutUntil = OptOutUntil(meta, now)
			byRef[k] = w
			order = append(order, w)
		}
		w.Pods++
		if overAge {
			w.OverAge++
		}
		if w.OldestPod == nil || p.CreationTimestamp.Before(w.OldestPod) {
			ct := p.CreationTimestamp
			w.OldestPod = &ct
		}
		v, err := skew.ParseVersion(ip.Version)
		if err != nil {
			continue // an unreadable version (a digest) is neither fresh nor stale
		}
		if v.Less(target) {
			w.Stale++
		}
		behind := v.MinorsBehind(target)
		if behind > t.MaxMinorsBehind {
			w.Lagging++
		}
		if w.OldestVersion == "" || behind > w.MinorsBehind {
			w.OldestVersion, w.MinorsBehind = ip.Version, behind
		}
	}
	sort.Slice(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		return a.Name < b.Name
	})
	r.Workloads = make([]Workload, 0, len(order))
	for _, w := range order {
		estimate(w, now)
		if w.Stale > 0 {
			w.Pinned = pinned(inv, revOf[w.Namespace], target)
			if w.Pinned != "" {
				w.NextRestart = nil
			}
		}
		r.Workloads = append(r.Workloads, *w)
	}
	r.Fleet, r.Teams, r.Namespaces = group(r.Workloads, now)
	r.Nodes.Nodes = len(inv.Nodes)
	for _, n := range inv.Nodes {
		zs, zl := nodeStale(n.Ztunnel, target, t.MaxMinorsBehind)
		cs, cl := nodeStale(n.CNI, target, t.MaxMinorsBehind)
		if zs {
			r.Nodes.StaleZtunnel++
		}
		if cs {
			r.Nodes.StaleCNI++
		}
		if zl || cl {
			r.Nodes.LaggingNodes++
		}
	}
	r.Waypoints.Waypoints = len(inv.Waypoints)
	for _, w := range inv.Waypoints {
		if r.Waypoints.PerNamespace == nil {
			r.Waypoints.PerNamespace = map[string]int{}
		}
		r.Waypoints.PerNamespace[w.Namespace]++
		stale, lagging := nodeStale(w.Version, target, t.MaxMinorsBehind)
		if stale {
			r.Waypoints.Stale++
			r.Waypoints.Behind = append(r.Waypoints.Behind, w)
		}
		if lagging {
			r.Waypoints.Lagging++
		}
	}
	return r, nil
}

func nodeStale(version string, target skew.Version, maxBehind int) (stale, lagging bool) {
	v, err := skew.ParseVersion(version)
	if err != nil {
		return false, false
	}
	return v.Less(target), v.MinorsBehind(target) > maxBehind
}

// pinned says why restarting a namespace's pods would not bring the
// designated version: its revision serves an older one.
func pinned(inv inventory.Inventory, revision string, target skew.Version) string {
	if revision == "" {
		return ""
	}
	ver, ok := inv.RevisionVersion(revision)
	if !ok {
		return fmt.Sprintf("its namespace's revision %s is not installed", revision)
	}
	v, err := skew.ParseVersion(ver)
	if err != nil || !v.Less(target) {
		return ""
	}
	return fmt.Sprintf("its namespace is on revision %s (%s): a restart keeps it there; migrate the namespace", revision, ver)
}

// OptOutUntil is when a workload's max-age opt-out ends, read from its
// v1alpha1.AnnotationMaxAgeOptOutUntil annotation; nil when it has none, its
// time is past at now, or it is not an RFC 3339 time (which protects nothing).
func OptOutUntil(meta *metav1.ObjectMeta, now time.Time) *metav1.Time {
	if meta == nil {
		return nil
	}
	v, ok := meta.Annotations[v1alpha1.AnnotationMaxAgeOptOutUntil]
	if !ok {
		return nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil || !t.After(now) {
		return nil
	}
	mt := metav1.NewTime(t)
	return &mt
}

// pick reads key from the workload's labels, then its annotations, then the
// namespace's labels and annotations.
func pick(key string, meta *metav1.ObjectMeta, ns *corev1.Namespace, def string) string {
	for _, m := range []*metav1.ObjectMeta{meta, nsMeta(ns)} {
		if m == nil {
			continue
		}
		if v := m.Labels[key]; v != "" {
			return v
		}
		if v := m.Annotations[key]; v != "" {
			return v
		}
	}
	return def
}

func nsMeta(ns *corev1.Namespace) *metav1.ObjectMeta {
	if ns == nil {
		return nil
	}
	return &ns.ObjectMeta
}

// estimate sets a workload's cadence, spread and next restart from its
// restart history. Restarts are taken as periodic: the next one is the first
// multiple of the median interval after the last restart that lies ahead of
// now (a late workload is expected within one interval, not at once).
func estimate(w *Workload, now time.Time) {
	if len(w.Restarts) < 2 {
		return
	}
	var gaps []time.Duration
	for i := 1; i < len(w.Restarts); i++ {
		gaps = append(gaps, w.Restarts[i].Sub(w.Restarts[i-1].Time))
	}
	slices.Sort(gaps)
	cadence := gaps[len(gaps)/2]
	if len(gaps)%2 == 0 {
		cadence = (gaps[len(gaps)/2-1] + gaps[len(gaps)/2]) / 2
	}
	if cadence <= 0 {
		return
	}
	last := w.Restarts[len(w.Restarts)-1].Time
	periods := time.Duration(1)
	if !last.Add(cadence).After(now) {
		periods = now.Sub(last)/cadence + 1
	}
	w.Cadence = metav1.Duration{Duration: cadence}
	w.Spread = metav1.Duration{Duration: periods * (gaps[len(gaps)-1] - gaps[0]) / 2}
	nt := metav1.NewTime(last.Add(periods * cadence))
	w.NextRestart = &nt
}

// group sums the workloads for the fleet, per team and per namespace.
func group(ws []Workload, now time.Time) (Group, []Group, []Group) {
	fleet := Group{Name: "fleet"}
	teams, nss := map[string]*Group{}, map[string]*Group{}
	for _, w := range ws {
		for _, g := range []*Group{&fleet, at(teams, w.Team), at(nss, w.Namespace)} {
			g.add(w, now)
		}
	}
	return fleet, sorted(teams), sorted(nss)
}

func at(m map[string]*Group, name string) *Group {
	if m[name] == nil {
		m[name] = &Group{Name: name}
	}
	return m[name]
}

func sorted(m map[string]*Group) []Group {
	out := make([]Group, 0, len(m))
	for _, g := range m {
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (g *Group) add(w Workload, now time.Time) {
	g.Pods += w.Pods
	g.Stale += w.Stale
	g.Lagging += w.Lagging
	g.OverAge += w.OverAge
	g.MinorsBehind = max(g.MinorsBehind, w.MinorsBehind)
	if w.OptedOutUntil != nil {
		g.OptedOut++
	}
	if w.OldestPod != nil && (g.OldestPod == nil || w.OldestPod.Before(g.OldestPod)) {
		g.OldestPod = w.OldestPod
	}
	if w.Stale == 0 {
		return
	}
	if w.NextRestart == nil {
		g.Exposure.Never++
		return
	}
	if d := w.NextRestart.Sub(now); d > g.Exposure.Window.Duration {
		g.Exposure.Window = metav1.Duration{Duration: d}
		g.Exposure.Error = w.Spread
	}
}

// ref names a workload (or a ReplicaSet, with Kind ReplicaSet).
type ref struct{ kind, ns, name string }

// history indexes the workloads' owners and revisions.
type history struct {
	rsOwner   map[ref]string             // a ReplicaSet -> its Deployment's name
	meta      map[ref]*metav1.ObjectMeta // a workload -> its metadata
	revisions map[ref][]metav1.Time      // a workload -> its revisions' creation times
}

func newHistory(o Objects) *history {
	h := &history{rsOwner: make(map[ref]string, len(o.ReplicaSets)), meta: map[ref]*metav1.ObjectMeta{}, revisions: map[ref][]metav1.Time{}}
	for i := range o.ReplicaSets {
		rs := &o.ReplicaSets[i]
		if c := metav1.GetControllerOfNoCopy(rs); c != nil && c.Kind == "Deployment" {
			h.rsOwner[ref{"ReplicaSet", rs.Namespace, rs.Name}] = c.Name
			k := ref{"Deployment", rs.Namespace, c.Name}
			h.revisions[k] = append(h.revisions[k], rs.CreationTimestamp)
		}
	}
	for i := range o.ControllerRevisions {
		cr := &o.ControllerRevisions[i]
		if c := metav1.GetControllerOfNoCopy(cr); c != nil {
			k := ref{c.Kind, cr.Namespace, c.Name}
			h.revisions[k] = append(h.revisions[k], cr.CreationTimestamp)
		}
	}
	for i := range o.Deployments {
		d := &o.Deployments[i]
		h.meta[ref{"Deployment", d.Namespace, d.Name}] = &d.ObjectMeta
	}
	for i := range o.StatefulSets {
		s := &o.StatefulSets[i]
		h.meta[ref{"StatefulSet", s.Namespace, s.Name}] = &s.ObjectMeta
	}
	for i := range o.DaemonSets {
		d := &o.DaemonSets[i]
		h.meta[ref{"DaemonSet", d.Namespace, d.Name}] = &d.ObjectMeta
	}
	for _, ts := range h.revisions {
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(&ts[j]) })
	}
	return h
}

// owner names the workload a pod belongs to and its metadata (nil when the
// workload was not listed; a bare pod is its own workload).
func (h *history) owner(p *corev1.Pod) (ref, *metav1.ObjectMeta) {
	c := metav1.GetControllerOfNoCopy(p)
	if c == nil {
		return ref{"Pod", p.Namespace, p.Name}, &p.ObjectMeta
	}
	k := ref{c.Kind, p.Namespace, c.Name}
	if k.kind == "ReplicaSet" {
		if d, ok := h.rsOwner[k]; ok {
			k = ref{"Deployment", p.Namespace, d}
		}
	}
	return k, h.meta[k]
}
