package revisions

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/istio/precheck"
	"github.com/nodewise/nodewise/istio/skew"
	"github.com/nodewise/nodewise/revisions/revtag"
)

// start checks the request against the cluster, points the tag at To and
// fixes the waves. Nothing is retagged or restarted here.
func (c *Controller) start(ctx context.Context, rm *v1alpha1.RevisionMigration, spec v1alpha1.RevisionMigrationSpec, snap *snapshot) error {
	if err := Validate(spec); err != nil {
		return c.refuse(ctx, rm, err.Error())
	}
	if g := conformanceGate(spec); g != nil {
		refusal, err := c.conformanceRunner(rm, spec, *g).Validate(ctx)
		if err != nil {
			return err
		}
		if refusal != "" {
			return c.refuse(ctx, rm, refusal)
		}
	}
	inv := snap.inv
	known := func() string {
		var names []string
		for _, r := range inv.Revisions {
			names = append(names, r.Name)
		}
		return strings.Join(names, ", ")
	}
	fromV, ok := inv.RevisionVersion(spec.From)
	if !ok {
		return c.refuse(ctx, rm, fmt.Sprintf("unknown revision %q in from (installed: %s)", spec.From, known()))
	}
	toV, ok := inv.RevisionVersion(spec.To)
	if !ok {
		return c.refuse(ctx, rm, fmt.Sprintf("unknown revision %q in to (installed: %s)", spec.To, known()))
	}
	// Written with the next phase: a refusal from here on, or the start.
	rm.Status.ToVersion = toV
	if _, err := skew.ParseVersion(fromV); err != nil {
		return c.refuse(ctx, rm, fmt.Sprintf("revision %s: unreadable istiod version: %v", spec.From, err))
	}
	target, err := skew.ParseVersion(toV)
	if err != nil {
		return c.refuse(ctx, rm, fmt.Sprintf("revision %s: unreadable istiod version: %v", spec.To, err))
	}
	if _, err := revtag.RevisionWebhook(ctx, c.cfg.Kube, spec.To); err != nil {
		return c.refuse(ctx, rm, err.Error())
	}
	if reason, err := c.precheck(ctx, rm.Name, spec, snap, target); err != nil || reason != "" {
		if err != nil {
			reason = "precheck could not run (nothing moves until it does): " + err.Error()
		}
		return c.refuse(ctx, rm, reason)
	}
	for _, r := range inv.Revisions {
		if r.Name == spec.To && !r.Ready {
			// Not a refusal: the install may still be rolling out. Nothing moves until it is Ready.
			reason := fmt.Sprintf("waiting for istiod of revision %s to have a Ready replica", spec.To)
			if rm.Status.Phase == v1alpha1.MigrationPending && rm.Status.Reason == reason {
				return nil
			}
			return c.setPhase(ctx, rm, v1alpha1.MigrationPending, reason)
		}
	}

	istioNS := c.cfg.Inventory.IstioNamespace
	if istioNS == "" {
		istioNS = istio.DefaultNamespace
	}
	// The control plane's own namespace is never restarted: its DaemonSets
	// are the ambient data plane, which NodeRollout moves node by node.
	scope := ScopeOf(spec, inv, snap.objects.Namespaces, snap.pods, istioNS)
	var cands []Candidate
	inScope := map[string]string{}
	members := map[string]Member{}
	for _, m := range scope.Members {
		cands = append(cands, Candidate{Name: m.Name, Labels: m.Labels})
		inScope[m.Name] = m.Original[istio.LabelRev]
		members[m.Name] = m
	}
	var waypoints map[string]map[string]string
	if spec.Waypoints == v1alpha1.WaypointsOnly {
		gws, err := c.waypointGateways(ctx)
		if err != nil {
			return c.refuse(ctx, rm, err.Error())
		}
		cands, waypoints = waypointScope(gws, snap.objects.Namespaces, inv.Tags, spec.From)
		inScope, members, scope.Skipped = map[string]string{}, map[string]Member{}, nil
		for _, cand := range cands {
			inScope[cand.Name] = ""
		}
		if len(cands) == 0 {
			return c.refuse(ctx, rm, fmt.Sprintf("no waypoint Gateway uses revision %s (by its own %s, its namespace's, or the default tag)", spec.From, istio.LabelRev))
		}
	}
	if len(cands) == 0 {
		reason := fmt.Sprintf("no namespace uses revision %s (directly or through a tag other than %s)", spec.From, spec.Tag)
		if len(scope.Skipped) > 0 {
			reason = fmt.Sprintf("no namespace can move from %s: %d skipped, first %s: %s", spec.From, len(scope.Skipped), scope.Skipped[0].Name, scope.Skipped[0].Reason)
		}
		rm.Status.Skipped = scope.Skipped
		return c.refuse(ctx, rm, reason)
	}
	// A namespace belongs to one live migration at a time. Read fresh: a
	// migration started earlier in this pass has just written its namespaces.
	others, err := c.cfg.Migrations.List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing RevisionMigrations: %w", err)
	}
	if owner, ns := claimedBy(others.Items, rm.Name, inScope); owner != "" {
		return c.refuse(ctx, rm, fmt.Sprintf("namespace %s belongs to RevisionMigration %s, which is still live; wait for it to finish or abort it", ns, owner))
	}
	var proxies []skew.Observation
	for _, p := range inv.Pods {
		if _, ok := inScope[p.Namespace]; !ok || p.Mode != inventory.ModeSidecar {
			continue
		}
		if v, err := skew.ParseVersion(p.Version); err == nil {
			proxies = append(proxies, skew.Observation{Component: skew.Sidecar, Subject: p.Namespace + "/" + p.Name, Revision: p.Revision, Version: v})
		}
	}
	for _, w := range inv.Waypoints {
		if _, moved := waypoints[w.Namespace][w.Name]; !moved {
			continue
		}
		if v, err := skew.ParseVersion(w.Version); err == nil {
			proxies = append(proxies, skew.Observation{Component: skew.Waypoint, Subject: w.Ref(), Revision: w.Revision, Version: v})
		}
	}
	if err := skew.CheckControlPlaneMove(c.cfg.Policy, proxies, target); err != nil {
		return c.refuse(ctx, rm, "refusing "+spec.From+" -> "+spec.To+": "+err.Error())
	}

	if cur, err := revtag.Get(ctx, c.cfg.Kube, spec.Tag); err == nil && cur != spec.To {
		for _, ns := range snap.objects.Namespaces {
			if ns.Labels[istio.LabelRev] == spec.Tag {
				return c.refuse(ctx, rm, fmt.Sprintf("tag %s points at %s and namespace %s uses it: moving it would move that namespace unrestarted; pick another tag", spec.Tag, cur, ns.Name))
			}
		}
	}
	// Last before the first write to the cluster: a migration that would be
	// refused is refused at once, not after its upstreams' soak.
	hold := c.promotionHold(ctx, rm, spec, toV)
	setPromoted(rm, hold)
	if hold != "" {
		reason := "waiting for promotion: " + hold
		if rm.Status.Phase == v1alpha1.MigrationPending && rm.Status.Reason == reason {
			return nil
		}
		return c.setPhase(ctx, rm, v1alpha1.MigrationPending, reason)
	}
	if err := revtag.Set(ctx, c.cfg.Kube, revtag.SetOptions{Tag: spec.Tag, Revision: spec.To, IstioNamespace: c.cfg.Inventory.IstioNamespace, Overwrite: true, FieldManager: FieldManager}); err != nil {
		return fmt.Errorf("pointing tag %s at %s: %w", spec.Tag, spec.To, err)
	}

	waves := Resolve(spec.Waves, spec.TierLabel, cands)
	st := &rm.Status
	st.Waves = waves
	st.Skipped = scope.Skipped
	st.Namespaces = nil
	for i, w := range waves {
		for _, ns := range w.Namespaces {
			st.Namespaces = append(st.Namespaces, v1alpha1.NamespaceStatus{Name: ns, Wave: int32(i), OriginalRev: inScope[ns],
				Adopted: members[ns].Implicit != "", OriginalLabels: members[ns].Original, Waypoints: waypoints[ns], Phase: v1alpha1.NamespacePending})
		}
	}
	now := metav1.NewTime(c.cfg.Now())
	st.StartedAt, st.WaveStartedAt, st.CurrentWave = &now, &now, 0
	adopted := 0
	for _, ns := range st.Namespaces {
		if ns.Adopted {
			adopted++
		}
	}
	reason := fmt.Sprintf("%d namespaces (%d adopted, %d skipped) in %d waves, %s (%s) -> %s (%s) via tag %s",
		len(st.Namespaces), adopted, len(st.Skipped), len(waves), spec.From, fromV, spec.To, toV, spec.Tag)
	if spec.Waypoints == v1alpha1.WaypointsOnly {
		// Decided once: a migration does not change method halfway.
		ok, why := skew.WaypointCanary(inv, target)
		st.WaypointMethod = v1alpha1.WaypointRelabel
		method := "waypoints relabelled in place"
		if ok {
			st.WaypointMethod, method = v1alpha1.WaypointCanary, "waypoints by weighted canary "+WeightSteps(spec.WaypointCanaryWeights)
		}
		reason += fmt.Sprintf("; %s (%s)", method, why)
	}
	return c.setPhase(ctx, rm, v1alpha1.MigrationProgressing, reason)
}

// claimedBy returns the first live migration (other than self) holding one of
// the namespaces, and that namespace. It is pure.
func claimedBy(all []v1alpha1.RevisionMigration, self string, namespaces map[string]string) (string, string) {
	for _, o := range all {
		if o.Name == self {
			continue
		}
		switch o.Status.Phase {
		case v1alpha1.MigrationSucceeded, v1alpha1.MigrationAborted, v1alpha1.MigrationRefused:
			continue
		}
		for _, ns := range o.Status.Namespaces {
			if _, ok := namespaces[ns.Name]; ok && ns.Phase != v1alpha1.NamespaceRolledBack {
				return o.Name, ns.Name
			}
		}
	}
	return "", ""
}

// precheck runs nodewise precheck's checks that the controller can decide
// (istioctl's analyzers are the CLI's), To's images on the nodes the
// migration touches among them: the reason to refuse, one finding a
// clause, or "" when no error is found.
func (c *Controller) precheck(ctx context.Context, name string, spec v1alpha1.RevisionMigrationSpec, snap *snapshot, to skew.Version) (string, error) {
	in := precheck.Input{Inventory: snap.inv, Pods: snap.objects.Pods, To: to}
	var err error
	if in.AuthorizationPolicies, err = precheck.List(ctx, c.cfg.Dynamic, precheck.AuthorizationPolicies); err != nil {
		return "", err
	}
	istioNS := c.cfg.Inventory.IstioNamespace
	if istioNS == "" {
		istioNS = istio.DefaultNamespace
	}
	if in.Pulls = Pulls(name, spec, snap.inv, snap.objects, istioNS); len(in.Pulls) > 0 {
		if in.Nodes, err = precheck.Nodes(ctx, c.cfg.Kube); err != nil {
			return "", err
		}
	}
	if errs := precheck.Errors(precheck.Check(in)); len(errs) > 0 {
		return precheck.Headline(errs), nil
	}
	return "", nil
}
