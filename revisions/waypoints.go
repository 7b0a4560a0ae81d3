package revisions

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio"
)

// A waypoints: Only migration moves waypoint Gateways instead of sidecar
// namespaces. Its status.namespaces are the waypoints' namespaces, each with
// the Gateways it moves and their original istio.io/rev labels; the phases
// mean what they mean for a sidecar namespace, but nothing is restarted:
// istiod rolls a waypoint's Deployment when its Gateway's revision changes,
// and the controller waits for the waypoint's pods to run To.

// gatewaysGVR is Gateway API's Gateway, the object a waypoint is.
var gatewaysGVR = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gateways"}

// waypointGateways lists the Gateways of class istio-waypoint.
func (c *Controller) waypointGateways(ctx context.Context) ([]unstructured.Unstructured, error) {
	if c.cfg.Dynamic == nil {
		return nil, fmt.Errorf("waypoints: Only needs a dynamic client to read Gateways (revisions.Config.Dynamic)")
	}
	list, err := c.cfg.Dynamic.Resource(gatewaysGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing waypoint Gateways (gateway.networking.k8s.io/v1): %w", err)
	}
	var out []unstructured.Unstructured
	for _, g := range list.Items {
		if class, _, _ := unstructured.NestedString(g.Object, "spec", "gatewayClassName"); class == istio.WaypointGatewayClass {
			out = append(out, g)
		}
	}
	return out, nil
}

// waypointScope is a waypoints: Only migration's namespaces: those with a
// waypoint Gateway on from, each with those Gateways' original istio.io/rev
// labels ("" for none). It is pure.
func waypointScope(gws []unstructured.Unstructured, nss []corev1.Namespace, tags map[string]string, from string) ([]Candidate, map[string]map[string]string) {
	labels := map[string]map[string]string{}
	for _, ns := range nss {
		labels[ns.Name] = ns.Labels
	}
	moved := map[string]map[string]string{}
	for _, g := range gws {
		if istio.WaypointRevision(g.GetLabels(), labels[g.GetNamespace()], tags) != from {
			continue
		}
		if moved[g.GetNamespace()] == nil {
			moved[g.GetNamespace()] = map[string]string{}
		}
		moved[g.GetNamespace()][g.GetName()] = g.GetLabels()[istio.LabelRev]
	}
	var cands []Candidate
	for ns := range moved {
		cands = append(cands, Candidate{Name: ns, Labels: labels[ns]})
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].Name < cands[j].Name })
	return cands, moved
}

// moveWaypoints moves the Gateways of the wave's Pending namespaces to
// spec.To: Retagging is written first (the originals are in status since
// the start), then each Gateway whose label is still its original is
// patched, then Retagged.
func (c *Controller) moveWaypoints(ctx context.Context, rm *v1alpha1.RevisionMigration, spec v1alpha1.RevisionMigrationSpec, wave int32) error {
	st := &rm.Status
	recorded := false
	for i := range st.Namespaces {
		ns := &st.Namespaces[i]
		if ns.Wave == wave && ns.Phase == v1alpha1.NamespacePending {
			ns.Phase, ns.Message, recorded = v1alpha1.NamespaceRetagging, "waypoints to move: "+waypointNames(ns), true
		}
	}
	if recorded {
		if err := c.writeStatus(ctx, rm); err != nil {
			return err
		}
	}
	patched := false
	for i := range st.Namespaces {
		ns := &st.Namespaces[i]
		if ns.Wave != wave || ns.Phase != v1alpha1.NamespaceRetagging {
			continue
		}
		msg, err := c.setWaypointRevs(ctx, ns, func(orig string) (from, to string) { return orig, spec.To })
		if err != nil {
			return err
		}
		if msg != "" {
			if ns.Message != msg {
				ns.Message, patched = msg, true
			}
			continue
		}
		ns.Phase, ns.Message, patched = v1alpha1.NamespaceRetagged, fmt.Sprintf("waypoints %s labelled %s=%s", waypointNames(ns), istio.LabelRev, spec.To), true
	}
	if patched {
		return c.writeStatus(ctx, rm)
	}
	return nil
}

// restoreWaypoints puts a namespace's moved Gateways back on their recorded
// labels; a Gateway someone else relabelled is left as it is.
func (c *Controller) restoreWaypoints(ctx context.Context, ns *v1alpha1.NamespaceStatus, to string) (string, error) {
	msg, err := c.setWaypointRevs(ctx, ns, func(orig string) (string, string) { return to, orig })
	if err != nil || msg != "" {
		return msg, err
	}
	return "waypoints " + waypointNames(ns) + " back on their original " + istio.LabelRev, nil
}

// setWaypointRevs moves each of ns's Gateways from one istio.io/rev value to
// another (both given its original; "" is no label). A Gateway already at
// the new value is left; one at neither is not touched, and the returned
// message says so. A deleted Gateway has nothing to move.
func (c *Controller) setWaypointRevs(ctx context.Context, ns *v1alpha1.NamespaceStatus, move func(orig string) (from, to string)) (string, error) {
	gws := c.cfg.Dynamic.Resource(gatewaysGVR).Namespace(ns.Name)
	for _, name := range sortedKeys(ns.Waypoints) {
		from, to := move(ns.Waypoints[name])
		g, err := gws.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("reading Gateway %s/%s: %w", ns.Name, name, err)
		}
		switch live := g.GetLabels()[istio.LabelRev]; live {
		case to:
			continue
		case from:
		default:
			return fmt.Sprintf("Gateway %s/%s is labelled %s=%q, neither %q nor %q: not changed; restore it or abort", ns.Name, name, istio.LabelRev, live, from, to), nil
		}
		var value any = to
		if to == "" {
			value = nil
		}
		body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{istio.LabelRev: value}, "resourceVersion": g.GetResourceVersion()}})
		if err != nil {
			return "", err
		}
		if _, err := gws.Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
			return "", fmt.Errorf("labelling Gateway %s/%s %s=%s: %w", ns.Name, name, istio.LabelRev, to, err)
		}
		c.cfg.Log.Info("waypoint moved", zap.String("gateway", ns.Name+"/"+name), zap.String(istio.LabelRev, to))
	}
	return "", nil
}

// waitWaypoints marks the namespaces in phase in (of wave, or every wave
// for -1) done once every one of their waypoints runs t: all its pods
// Ready on t's revision at t's minor, none left on another. The waypoints
// waited for are the moved Gateways, or with canaries their canaries.
func (c *Controller) waitWaypoints(ctx context.Context, rm *v1alpha1.RevisionMigration, snap *snapshot, wave int32, in, done v1alpha1.NamespacePhase, t target, canaries bool) (time.Duration, error) {
	changed := false
	for i := range rm.Status.Namespaces {
		ns := &rm.Status.Namespaces[i]
		if ns.Phase != in || (wave >= 0 && ns.Wave != wave) {
			continue
		}
		names := sortedKeys(ns.Waypoints)
		if canaries {
			names = canaryNames(ns)
		}
		msg := waypointsWait(snap, ns.Name, names, t)
		if msg == "" {
			what := "waypoints " + waypointNames(ns)
			if canaries {
				what = "canary waypoints " + ns.Name + "/" + strings.Join(names, ", "+ns.Name+"/")
			}
			ns.Phase, msg = done, fmt.Sprintf("%s Ready on %s", what, t.rev)
			c.cfg.Log.Info("waypoints done", zap.String("namespace", ns.Name), zap.String("phase", string(done)))
		}
		if ns.Message != msg {
			ns.Message, changed = msg, true
		}
	}
	if !changed {
		return c.cfg.Interval, nil
	}
	return c.cfg.Interval, c.writeStatus(ctx, rm)
}

// waypointsWait is what the first of ns's waypoints names not yet running t
// waits for, or "" when every one does. It is pure.
func waypointsWait(snap *snapshot, ns string, names []string, t target) string {
	for _, name := range names {
		msg := fmt.Sprintf("waiting for waypoint %s/%s to run %s: no pod seen", ns, name, t.rev)
		for _, w := range snap.inv.Waypoints {
			if w.Namespace != ns || w.Name != name {
				continue
			}
			switch {
			case w.Rolling || w.Revision != t.rev || !sameMinor(w.Version, t.version):
				msg = fmt.Sprintf("waiting for waypoint %s to roll onto %s (its oldest pod runs %s on %s)", w.Ref(), t.rev, w.Version, w.Revision)
			case w.Ready < w.Pods:
				msg = fmt.Sprintf("waiting for waypoint %s: %d of %d pods Ready", w.Ref(), w.Ready, w.Pods)
			default:
				msg = ""
			}
		}
		if msg != "" {
			return msg
		}
	}
	return ""
}

func waypointNames(ns *v1alpha1.NamespaceStatus) string {
	names := sortedKeys(ns.Waypoints)
	for i := range names {
		names[i] = ns.Name + "/" + names[i]
	}
	return strings.Join(names, ", ")
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
