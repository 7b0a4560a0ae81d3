package revisions

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio"
)

// A waypoints: Only migration with status.waypointMethod Canary moves each
// waypoint by Istio's weighted waypoint canary instead of relabelling it in
// place. Every write is recorded in status first and every step repeats
// harmlessly, so a controller killed anywhere resumes without duplicates:
//
//	Pending    --record canaries + users--> Retagging
//	Retagging  --create canary Gateways (rev To)--> Retagged --stamp--> Restarting
//	Restarting --canaries Ready on To--> Ready
//	wave Ready --record weight w--> users labelled canary + weight w --gate--> next w
//	last w passed --record promoted--> primaries relabelled To, rolled
//	           --> users' canary keys removed, canaries deleted --> next wave
//
// An abort removes the users' canary keys, deletes the canaries and puts a
// primary it had promoted back on its recorded label.

// LabelManagedBy on a canary Gateway (value FieldManager) says nodewise made it.
const LabelManagedBy = "app.kubernetes.io/managed-by"

// canaryName is the canary Gateway beside primary: <primary>-<to>, cut to
// a label value's 63 characters (istiod names the Deployment after it).
func canaryName(primary, to string) string {
	suffix := "-" + to
	if len(primary)+len(suffix) > 63 {
		primary = primary[:max(0, 63-len(suffix))]
	}
	return primary + suffix
}

// canaryNames are ns's canary Gateways, sorted.
func canaryNames(ns *v1alpha1.NamespaceStatus) []string {
	out := make([]string, 0, len(ns.Canaries))
	for _, name := range sortedKeys(ns.Canaries) {
		out = append(out, ns.Canaries[name])
	}
	return out
}

// findWaypointUsers lists the Namespaces and Services whose
// istio.io/use-waypoint names one of gateways (in namespace gwNS).
func (c *Controller) findWaypointUsers(ctx context.Context, gwNS string, gateways map[string]string) ([]v1alpha1.WaypointUser, error) {
	sel := metav1.ListOptions{LabelSelector: istio.LabelUseWaypoint}
	uses := func(own string, labels map[string]string) string {
		name, at := labels[istio.LabelUseWaypoint], labels[istio.LabelUseWaypointNamespace]
		if at == "" {
			at = own
		}
		if _, ok := gateways[name]; ok && at == gwNS {
			return name
		}
		return ""
	}
	var out []v1alpha1.WaypointUser
	nss, err := c.cfg.Kube.CoreV1().Namespaces().List(ctx, sel)
	if err != nil {
		return nil, fmt.Errorf("listing the namespaces that use a waypoint: %w", err)
	}
	for _, n := range nss.Items {
		if gw := uses(n.Name, n.Labels); gw != "" {
			out = append(out, v1alpha1.WaypointUser{Kind: "Namespace", Name: n.Name, Waypoint: gw})
		}
	}
	svcs, err := c.cfg.Kube.CoreV1().Services("").List(ctx, sel)
	if err != nil {
		return nil, fmt.Errorf("listing the services that use a waypoint: %w", err)
	}
	for _, s := range svcs.Items {
		if gw := uses(s.Namespace, s.Labels); gw != "" {
			out = append(out, v1alpha1.WaypointUser{Kind: "Service", Namespace: s.Namespace, Name: s.Name, Waypoint: gw})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		return a.Kind+"/"+a.Namespace+"/"+a.Name < b.Kind+"/"+b.Namespace+"/"+b.Name
	})
	return out, nil
}

// startCanaries records the wave's canaries and their users (Pending →
// Retagging), then creates each canary Gateway not there yet (→ Retagged).
func (c *Controller) startCanaries(ctx context.Context, rm *v1alpha1.RevisionMigration, spec v1alpha1.RevisionMigrationSpec, wave int32) error {
	err := c.forWave(ctx, rm, wave, v1alpha1.NamespacePending, func(ns *v1alpha1.NamespaceStatus) (bool, error) {
		users, err := c.findWaypointUsers(ctx, ns.Name, ns.Waypoints)
		if err != nil {
			return false, err
		}
		ns.Canaries = map[string]string{}
		for name := range ns.Waypoints {
			ns.Canaries[name] = canaryName(name, spec.To)
		}
		ns.WaypointUsers = users
		ns.Phase, ns.Message = v1alpha1.NamespaceRetagging, fmt.Sprintf("canaries to create beside %s; %d users recorded", waypointNames(ns), len(users))
		return true, nil
	})
	if err != nil {
		return err
	}
	return c.forWave(ctx, rm, wave, v1alpha1.NamespaceRetagging, func(ns *v1alpha1.NamespaceStatus) (bool, error) {
		msg := ""
		for _, primary := range sortedKeys(ns.Waypoints) {
			m, err := c.ensureCanary(ctx, ns.Name, primary, ns.Canaries[primary], spec.To)
			if err != nil || m != "" {
				msg = m
				if err != nil {
					return false, err
				}
				break
			}
		}
		if msg == "" {
			msg = fmt.Sprintf("canary Gateways %s/%s created on %s", ns.Name, strings.Join(canaryNames(ns), ", "+ns.Name+"/"), spec.To)
			ns.Phase = v1alpha1.NamespaceRetagged
		} else if ns.Message == msg {
			return false, nil
		}
		ns.Message = msg
		return true, nil
	})
}

// forWave calls step on each namespace of wave in phase, then writes
// status once if any step changed it.
func (c *Controller) forWave(ctx context.Context, rm *v1alpha1.RevisionMigration, wave int32, phase v1alpha1.NamespacePhase, step func(*v1alpha1.NamespaceStatus) (bool, error)) error {
	changed := false
	for i := range rm.Status.Namespaces {
		ns := &rm.Status.Namespaces[i]
		if ns.Wave != wave || ns.Phase != phase {
			continue
		}
		ch, err := step(ns)
		if err != nil {
			return err
		}
		changed = changed || ch
	}
	if !changed {
		return nil
	}
	return c.writeStatus(ctx, rm)
}

// ensureCanary creates the canary Gateway name beside primary: its spec,
// labels and annotations, istio.io/rev=to, owned by the primary (deleting
// the primary deletes it) and labelled as nodewise's. One already there and
// nodewise's is left; one that is someone else's is not touched, and the
// returned message says so.
func (c *Controller) ensureCanary(ctx context.Context, ns, primary, name, to string) (string, error) {
	gws := c.cfg.Dynamic.Resource(gatewaysGVR).Namespace(ns)
	if g, err := gws.Get(ctx, name, metav1.GetOptions{}); err == nil {
		if !ownCanary(g) {
			return fmt.Sprintf("Gateway %s/%s exists and is not nodewise's canary: not changed; rename it or abort", ns, name), nil
		}
		return "", nil
	} else if !apierrors.IsNotFound(err) {
		return "", fmt.Errorf("reading canary Gateway %s/%s: %w", ns, name, err)
	}
	p, err := gws.Get(ctx, primary, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", nil // nothing to stand beside; the promotion and the abort skip it too
	}
	if err != nil {
		return "", fmt.Errorf("reading Gateway %s/%s: %w", ns, primary, err)
	}
	labels := map[string]string{}
	for k, v := range p.GetLabels() {
		labels[k] = v
	}
	labels[istio.LabelRev], labels[LabelManagedBy] = to, FieldManager
	annotations := map[string]string{}
	for k, v := range p.GetAnnotations() {
		if k != "kubectl.kubernetes.io/last-applied-configuration" {
			annotations[k] = v
		}
	}
	g := &unstructured.Unstructured{Object: map[string]any{"apiVersion": p.GetAPIVersion(), "kind": p.GetKind(), "spec": p.Object["spec"]}}
	g.SetNamespace(ns)
	g.SetName(name)
	g.SetLabels(labels)
	g.SetAnnotations(annotations)
	g.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: p.GetAPIVersion(), Kind: p.GetKind(), Name: p.GetName(), UID: p.GetUID()}})
	if _, err := gws.Create(ctx, g, metav1.CreateOptions{FieldManager: FieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating canary Gateway %s/%s on %s: %w", ns, name, to, err)
	}
	c.cfg.Log.Info("canary waypoint created", zap.String("gateway", ns+"/"+name), zap.String(istio.LabelRev, to), zap.String("beside", primary))
	return "", nil
}

// ownCanary reports whether nodewise made Gateway g.
func ownCanary(g *unstructured.Unstructured) bool {
	return g.GetLabels()[LabelManagedBy] == FieldManager
}

// canaryStep says what a wave's canary calls for next.
type canaryStep int

const (
	canaryWait  canaryStep = iota // a write or a roll in flight: look again
	canaryJudge                   // the recorded weight is on every user: judge it
	canaryDone                    // promoted and cleaned up: the wave is done
)

// canaryWave drives a wave whose canaries are Ready: the recorded weight
// onto every user (the first weight recorded first), or once promoted, the
// primaries onto to, then the canaries removed.
func (c *Controller) canaryWave(ctx context.Context, rm *v1alpha1.RevisionMigration, spec v1alpha1.RevisionMigrationSpec, snap *snapshot, wave int32, to target) (canaryStep, error) {
	st := &rm.Status
	w := &st.Waves[wave]
	if w.CanaryPromoted {
		return c.promoteCanaries(ctx, rm, snap, wave, to)
	}
	if w.CanaryWeight == 0 {
		w.CanaryWeight, w.ReadyAt = spec.WaypointCanaryWeights[0], nil
		if err := c.writeStatus(ctx, rm); err != nil {
			return canaryWait, err
		}
	}
	for _, ns := range st.Namespaces {
		if ns.Wave != wave || ns.Phase != v1alpha1.NamespaceReady {
			continue
		}
		for _, u := range ns.WaypointUsers {
			if err := c.pointUser(ctx, ns.Name, u, ns.Canaries[u.Waypoint], &w.CanaryWeight); err != nil {
				return canaryWait, err
			}
		}
	}
	return canaryJudge, nil
}

// nextWeight moves a wave whose weight passed its gate on: to the next
// weight (judged from a fresh soak), or after the last, to the promotion.
// It says which, for the phase's reason.
func nextWeight(spec v1alpha1.RevisionMigrationSpec, w *v1alpha1.ResolvedWave) string {
	passed := w.CanaryWeight
	w.ReadyAt = nil
	for _, next := range spec.WaypointCanaryWeights {
		if next > passed {
			w.CanaryWeight = next
			return fmt.Sprintf("wave %s: waypoint canary at %d%% passed; now %d%%", w.Name, passed, next)
		}
	}
	w.CanaryPromoted = true
	return fmt.Sprintf("wave %s: waypoint canary at %d%% passed; promoting: the primary waypoints move to the new revision", w.Name, passed)
}

// promoteCanaries moves the wave's primary Gateways to to, waits for them
// to roll, then takes the canary keys off their users and deletes the
// canaries (every step repeats harmlessly).
func (c *Controller) promoteCanaries(ctx context.Context, rm *v1alpha1.RevisionMigration, snap *snapshot, wave int32, to target) (canaryStep, error) {
	st := &rm.Status
	changed, waiting := false, false
	for i := range st.Namespaces {
		ns := &st.Namespaces[i]
		if ns.Wave != wave || ns.Phase != v1alpha1.NamespaceReady {
			continue
		}
		msg, err := c.setWaypointRevs(ctx, ns, func(orig string) (string, string) { return orig, to.rev })
		if err != nil {
			return canaryWait, err
		}
		if msg == "" {
			msg = waypointsWait(snap, ns.Name, sortedKeys(ns.Waypoints), to)
		}
		if msg != "" {
			waiting = true
			if ns.Message != msg {
				ns.Message, changed = msg, true
			}
		}
	}
	if waiting {
		if changed {
			return canaryWait, c.writeStatus(ctx, rm)
		}
		return canaryWait, nil
	}
	for i := range st.Namespaces {
		ns := &st.Namespaces[i]
		if ns.Wave != wave || ns.Phase != v1alpha1.NamespaceReady {
			continue
		}
		if err := c.removeCanaries(ctx, ns); err != nil {
			return canaryWait, err
		}
		ns.Message = fmt.Sprintf("waypoints %s promoted to %s; canaries removed", waypointNames(ns), to.rev)
	}
	return canaryDone, nil
}

// removeCanaries takes the canary label and weight off ns's recorded users
// (those still pointed at its canaries) and deletes its canary Gateways.
func (c *Controller) removeCanaries(ctx context.Context, ns *v1alpha1.NamespaceStatus) error {
	for _, u := range ns.WaypointUsers {
		if err := c.pointUser(ctx, ns.Name, u, ns.Canaries[u.Waypoint], nil); err != nil {
			return err
		}
	}
	gws := c.cfg.Dynamic.Resource(gatewaysGVR).Namespace(ns.Name)
	for _, name := range canaryNames(ns) {
		g, err := gws.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading canary Gateway %s/%s: %w", ns.Name, name, err)
		}
		if !ownCanary(g) {
			continue
		}
		uid := g.GetUID()
		if err := gws.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting canary Gateway %s/%s: %w", ns.Name, name, err)
		}
		c.cfg.Log.Info("canary waypoint deleted", zap.String("gateway", ns.Name+"/"+name))
	}
	return nil
}

// pointUser sets user u's canary label to canary (in gwNS) with weight, or
// for a nil weight removes the canary keys it carries for canary. A user
// already so, deleted, or pointed at another canary by someone else is
// left as it is.
func (c *Controller) pointUser(ctx context.Context, gwNS string, u v1alpha1.WaypointUser, canary string, weight *int32) error {
	var meta *metav1.ObjectMeta
	var patch func(body []byte) error
	switch u.Kind {
	case "Namespace":
		n, err := c.cfg.Kube.CoreV1().Namespaces().Get(ctx, u.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading namespace %s: %w", u.Name, err)
		}
		meta = &n.ObjectMeta
		patch = func(body []byte) error {
			_, err := c.cfg.Kube.CoreV1().Namespaces().Patch(ctx, u.Name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: FieldManager})
			return err
		}
	case "Service":
		s, err := c.cfg.Kube.CoreV1().Services(u.Namespace).Get(ctx, u.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading service %s/%s: %w", u.Namespace, u.Name, err)
		}
		meta = &s.ObjectMeta
		patch = func(body []byte) error {
			_, err := c.cfg.Kube.CoreV1().Services(u.Namespace).Patch(ctx, u.Name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: FieldManager})
			return err
		}
	default:
		return nil
	}
	own := meta.Namespace
	if u.Kind == "Namespace" {
		own = meta.Name
	}
	live, liveNS, liveWeight := meta.Labels[istio.LabelUseWaypointCanary], meta.Labels[istio.LabelUseWaypointCanaryNamespace], meta.Annotations[istio.AnnotationUseWaypointCanaryWeight]
	var labels, annotations map[string]any
	if weight == nil {
		if live != canary || (liveNS != "" && liveNS != gwNS) {
			return nil
		}
		labels = map[string]any{istio.LabelUseWaypointCanary: nil, istio.LabelUseWaypointCanaryNamespace: nil}
		annotations = map[string]any{istio.AnnotationUseWaypointCanaryWeight: nil}
	} else {
		wantNS := ""
		if own != gwNS {
			wantNS = gwNS
		}
		w := strconv.Itoa(int(*weight))
		if live != "" && (live != canary || liveNS != wantNS) {
			c.cfg.Log.Info("waypoint user points at another canary: left alone", zap.String("user", u.Kind+" "+u.Namespace+"/"+u.Name), zap.String(istio.LabelUseWaypointCanary, live))
			return nil
		}
		if live == canary && liveWeight == w {
			return nil
		}
		labels = map[string]any{istio.LabelUseWaypointCanary: canary}
		if wantNS != "" {
			labels[istio.LabelUseWaypointCanaryNamespace] = wantNS
		}
		annotations = map[string]any{istio.AnnotationUseWaypointCanaryWeight: w}
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels, "annotations": annotations, "resourceVersion": meta.ResourceVersion}})
	if err != nil {
		return err
	}
	if err := patch(body); err != nil {
		return fmt.Errorf("pointing %s %s at canary waypoint %s/%s: %w", u.Kind, userRef(u), gwNS, canary, err)
	}
	weightLog := "(removed)"
	if weight != nil {
		weightLog = strconv.Itoa(int(*weight))
	}
	c.cfg.Log.Info("waypoint user patched", zap.String("user", u.Kind+" "+userRef(u)), zap.String("canary", gwNS+"/"+canary), zap.String("weight", weightLog))
	return nil
}

func userRef(u v1alpha1.WaypointUser) string {
	if u.Namespace == "" {
		return u.Name
	}
	return u.Namespace + "/" + u.Name
}

// WeightSteps is a canary's weights as people read them: "10→50→100%".
func WeightSteps(ws []int32) string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = strconv.Itoa(int(w))
	}
	return strings.Join(parts, "→") + "%"
}
