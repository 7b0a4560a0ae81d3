package revisions

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/istio/skew"
)

// workload is a Deployment, StatefulSet or DaemonSet as far as restarting goes.
type workload struct {
	Kind, Namespace, Name string
	Pods                  int
	TemplateLabels        map[string]string
	// Stamp is the template's restartedAt annotation.
	Stamp string
	// Settled: the controller has observed the latest spec and every pod is
	// updated and available.
	Settled bool
	// MaxUnavailable is how many pods the workload's own rollout may take down at once.
	MaxUnavailable int
}

func (w workload) String() string { return strings.ToLower(w.Kind) + "/" + w.Namespace + "/" + w.Name }

func scaled(v *intstr.IntOrString, def string, total int) int {
	x := intstr.FromString(def)
	if v != nil {
		x = *v
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&x, total, false)
	if err != nil {
		return 1
	}
	return n
}

// workloadsOf groups the Deployments, StatefulSets and DaemonSets by namespace.
// It is pure.
func workloadsOf(deps []appsv1.Deployment, sts []appsv1.StatefulSet, dss []appsv1.DaemonSet) map[string][]workload {
	out := map[string][]workload{}
	for _, d := range deps {
		n := 1
		if d.Spec.Replicas != nil {
			n = int(*d.Spec.Replicas)
		}
		mu := n
		if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
			var u, s *intstr.IntOrString
			if ru := d.Spec.Strategy.RollingUpdate; ru != nil {
				u, s = ru.MaxUnavailable, ru.MaxSurge
			}
			mu = scaled(u, "25%", n)
			if mu == 0 && scaled(s, "25%", n) == 0 {
				mu = 1
			}
		}
		st := d.Status
		ns := d.Namespace
		out[ns] = append(out[ns], workload{
			Kind: "Deployment", Namespace: ns, Name: d.Name, Pods: n,
			TemplateLabels: d.Spec.Template.Labels, Stamp: d.Spec.Template.Annotations[AnnotationRestartedAt],
			Settled:        st.ObservedGeneration >= d.Generation && int(st.UpdatedReplicas) == n && int(st.Replicas) == n && int(st.AvailableReplicas) == n,
			MaxUnavailable: mu,
		})
	}
	for _, s := range sts {
		n := 1
		if s.Spec.Replicas != nil {
			n = int(*s.Spec.Replicas)
		}
		mu := 1
		if ru := s.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.MaxUnavailable != nil {
			mu = max(1, scaled(ru.MaxUnavailable, "1", n))
		}
		st := s.Status
		ns := s.Namespace
		out[ns] = append(out[ns], workload{
			Kind: "StatefulSet", Namespace: ns, Name: s.Name, Pods: n,
			TemplateLabels: s.Spec.Template.Labels, Stamp: s.Spec.Template.Annotations[AnnotationRestartedAt],
			Settled:        st.ObservedGeneration >= s.Generation && int(st.UpdatedReplicas) == n && int(st.ReadyReplicas) == n && st.CurrentRevision == st.UpdateRevision,
			MaxUnavailable: mu,
		})
	}
	for _, d := range dss {
		n := int(d.Status.DesiredNumberScheduled)
		mu := 1
		if ru := d.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.MaxUnavailable != nil {
			mu = max(1, scaled(ru.MaxUnavailable, "1", n))
		}
		st := d.Status
		ns := d.Namespace
		out[ns] = append(out[ns], workload{
			Kind: "DaemonSet", Namespace: ns, Name: d.Name, Pods: n,
			TemplateLabels: d.Spec.Template.Labels, Stamp: d.Spec.Template.Annotations[AnnotationRestartedAt],
			Settled:        st.ObservedGeneration >= d.Generation && int(st.UpdatedNumberScheduled) == n && int(st.NumberAvailable) == n,
			MaxUnavailable: mu,
		})
	}
	return out
}

// restart stamps the workload's pod template, which makes its controller
// replace every pod, as `kubectl rollout restart` does.
func restart(ctx context.Context, c kubernetes.Interface, w workload, stamp string) error {
	patch := []byte(fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{%q:%q}}}}}`, AnnotationRestartedAt, stamp))
	var err error
	switch w.Kind {
	case "Deployment":
		_, err = c.AppsV1().Deployments(w.Namespace).Patch(ctx, w.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	case "StatefulSet":
		_, err = c.AppsV1().StatefulSets(w.Namespace).Patch(ctx, w.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	case "DaemonSet":
		_, err = c.AppsV1().DaemonSets(w.Namespace).Patch(ctx, w.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	}
	if err != nil {
		return fmt.Errorf("restarting %s: %w", w, err)
	}
	return nil
}

// pdbBlock says why restarting w now could break a PodDisruptionBudget, or
// "" when it cannot: every budget covering w must allow at least as many
// disruptions as w's rollout may cause, and no other workload under the same
// budget may be mid-restart. It is pure.
func pdbBlock(pdbs []policyv1.PodDisruptionBudget, w workload, all []workload, stamp string) string {
	for _, p := range pdbs {
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(w.TemplateLabels)) {
			continue
		}
		if w.MaxUnavailable > 0 && int(p.Status.DisruptionsAllowed) < w.MaxUnavailable {
			return fmt.Sprintf("PDB %s/%s allows %d disruptions and %s may take %d pods down", p.Namespace, p.Name, p.Status.DisruptionsAllowed, w, w.MaxUnavailable)
		}
		for _, o := range all {
			if o.Name == w.Name && o.Kind == w.Kind {
				continue
			}
			if o.Stamp == stamp && !o.Settled && sel.Matches(labels.Set(o.TemplateLabels)) {
				return fmt.Sprintf("PDB %s/%s: waiting for %s to finish restarting", p.Namespace, p.Name, o)
			}
		}
	}
	return ""
}

// podsOn reports whether every pod of a namespace runs a Ready proxy of
// revision rev at version's minor, and if not, what it waits for. Pods that
// opted out of injection are ignored. Fewer live pods than want (the
// workloads' replicas) means the pod cache has not caught up yet: not ready.
// It is pure.
func podsOn(pods []corev1.Pod, ns inventory.Namespace, rev string, version skew.Version, want int) (bool, string) {
	waiting, live := 0, 0
	first := ""
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		live++
		if p.Labels[istio.LabelInject] == "false" {
			continue
		}
		cp, ok := inventory.ClassifyPod(p, ns, nil, nil)
		problem := ""
		switch {
		case !ok || cp.Mode != inventory.ModeSidecar:
			problem = "has no sidecar"
		case cp.Revision != rev:
			problem = "runs revision " + cp.Revision
		case !sameMinor(cp.Version, version):
			problem = "runs proxy " + cp.Version
		case !cp.Ready:
			problem = "is not Ready"
		}
		if problem != "" {
			waiting++
			if first == "" {
				first = "pod " + p.Name + " " + problem
			}
		}
	}
	if waiting == 0 && live < want {
		return false, fmt.Sprintf("%d of %d pods seen", live, want)
	}
	if waiting == 0 {
		return true, ""
	}
	return false, fmt.Sprintf("%d pods not yet Ready on %s (%s)", waiting, rev, first)
}

func sameMinor(tag string, v skew.Version) bool {
	pv, err := skew.ParseVersion(tag)
	return err == nil && pv.Major == v.Major && pv.Minor == v.Minor
}

// snapshot is what one reconcile sees, read once from the caches.
type snapshot struct {
	inv       inventory.Inventory
	objects   inventory.Objects
	workloads map[string][]workload
	pdbs      map[string][]policyv1.PodDisruptionBudget
	pods      map[string][]corev1.Pod
}

// buildSnapshot groups the observed objects. It is pure.
func buildSnapshot(opts inventory.Options, o inventory.Objects, sts []appsv1.StatefulSet, dss []appsv1.DaemonSet, pdbs []policyv1.PodDisruptionBudget) (*snapshot, error) {
	inv, err := inventory.Build(opts, o)
	if err != nil {
		return nil, err
	}
	s := &snapshot{inv: inv, objects: o, workloads: workloadsOf(o.Deployments, sts, dss), pdbs: map[string][]policyv1.PodDisruptionBudget{}, pods: map[string][]corev1.Pod{}}
	for _, p := range pdbs {
		s.pdbs[p.Namespace] = append(s.pdbs[p.Namespace], p)
	}
	for _, p := range o.Pods {
		s.pods[p.Namespace] = append(s.pods[p.Namespace], p)
	}
	return s, nil
}

// wrongProxy names a pod made from its workload's restarted template (it
// carries the namespace's restart stamp, written after its label moved) whose
// injected proxy is not of rev at version's minor: it restarted onto the old
// proxy, which waiting cannot fix. "" when there is none. It is pure.
func wrongProxy(pods []corev1.Pod, ns inventory.Namespace, rev string, version skew.Version, stamp string) string {
	for i := range pods {
		p := &pods[i]
		if !live(p) || stamp == "" || p.Annotations[AnnotationRestartedAt] != stamp {
			continue
		}
		cp, ok := inventory.ClassifyPod(p, ns, nil, nil)
		if !ok || cp.Mode != inventory.ModeSidecar {
			continue
		}
		if cp.Revision != rev || !sameMinor(cp.Version, version) {
			return fmt.Sprintf("pod %s/%s restarted onto the old proxy: revision %s, proxy %s, after its namespace moved to %s",
				p.Namespace, p.Name, cp.Revision, cp.Version, rev)
		}
	}
	return ""
}

// errWrongProxy halts a migration: a restarted pod runs the old proxy.
type errWrongProxy struct{ reason string }

func (e errWrongProxy) Error() string { return e.reason }
