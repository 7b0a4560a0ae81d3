package revisions

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/istio/inventory"
)

// Member is a namespace a migration moves, and how.
type Member struct {
	Name   string
	Labels map[string]string
	// Original are the namespace's istio.io/rev and istio-injection labels
	// (only those it has): what an abort restores.
	Original map[string]string
	// Implicit says how the namespace uses From without naming it ("" when
	// it names it in istio.io/rev): adopting it is part of the move.
	Implicit string
}

// Change describes the label patch that moves the namespace onto tag.
func (m Member) Change(tag string) string {
	return describe(m.Original) + " -> " + istio.LabelRev + "=" + tag
}

func describe(l map[string]string) string {
	var parts []string
	for _, k := range []string{istio.LabelInjection, istio.LabelRev} {
		if v, ok := l[k]; ok {
			parts = append(parts, k+"="+v)
		}
	}
	if len(parts) == 0 {
		return "no label"
	}
	return strings.Join(parts, ",")
}

// Scope is what a migration takes: the namespaces it moves and the ones
// using From it leaves alone, with the reason.
type Scope struct {
	Members []Member
	Skipped []v1alpha1.SkippedNamespace
}

// ScopeOf decides which namespaces a migration of spec takes. It is pure.
//
//   - istio.io/rev naming From (or a tag resolving to it), without
//     istio-injection: an explicit member.
//   - istio-injection=enabled while the default tag resolves to From: an
//     implicit member. istio-injection takes precedence over istio.io/rev in
//     the injector's selectors, so this holds whatever istio.io/rev says, and
//     moving it means removing istio-injection.
//   - no label while the default tag resolves to From and some pod runs a
//     sidecar of From: an implicit member, unless its pods choose injection or
//     their revision themselves, or a pod without a sidecar would get one.
//   - istio-injection set to anything but enabled, while the namespace would
//     otherwise use From: skipped, since the namespace opted out.
//
// Ambient namespaces and the Istio namespace are never members.
func ScopeOf(spec v1alpha1.RevisionMigrationSpec, inv inventory.Inventory, namespaces []corev1.Namespace, pods map[string][]corev1.Pod, istioNamespace string) Scope {
	spec = Defaulted(spec)
	var sc Scope
	skip := func(ns, why string) {
		sc.Skipped = append(sc.Skipped, v1alpha1.SkippedNamespace{Name: ns, Reason: why})
	}
	defaultRev := inv.Resolve(istio.DefaultTag)
	for i := range namespaces {
		ns := &namespaces[i]
		if ns.Name == istioNamespace || ns.DeletionTimestamp != nil {
			continue
		}
		l := ns.Labels
		rev, hasRev := l[istio.LabelRev]
		inj, hasInj := l[istio.LabelInjection]
		original := map[string]string{}
		if hasRev {
			original[istio.LabelRev] = rev
		}
		if hasInj {
			original[istio.LabelInjection] = inj
		}
		explicitFrom := hasRev && rev != spec.Tag && inv.Resolve(rev) == spec.From
		implicitFrom := !hasRev && defaultRev == spec.From && runsRevision(pods[ns.Name], spec.From, inv.Tags)
		if l[istio.LabelDataplaneMode] == string(inventory.ModeAmbient) {
			// Its istio.io/rev picks waypoints; NodeRollout moves its data plane.
			continue
		}
		m := Member{Name: ns.Name, Labels: l, Original: original}
		switch {
		case hasInj && inj == "enabled":
			if defaultRev != spec.From {
				if explicitFrom {
					skip(ns.Name, fmt.Sprintf("istio-injection=enabled overrides %s=%s: its pods are injected by the default tag's revision %s, not %s", istio.LabelRev, rev, defaultRev, spec.From))
				}
				continue
			}
			if hasRev {
				m.Implicit = fmt.Sprintf("istio-injection=enabled (overriding %s=%s)", istio.LabelRev, rev)
			} else {
				m.Implicit = "istio-injection=enabled"
			}
		case hasInj:
			if explicitFrom || defaultRev == spec.From && !hasRev {
				skip(ns.Name, fmt.Sprintf("istio-injection=%s: the namespace opted out of injection; nodewise does not opt it in", inj))
			}
			continue
		case explicitFrom:
		case implicitFrom:
			if why := perPodChoice(pods[ns.Name]); why != "" {
				skip(ns.Name, "uses "+spec.From+" through the default tag, but "+why)
				continue
			}
			m.Implicit = "no injection label (default tag -> " + spec.From + ")"
		default:
			continue
		}
		if m.Implicit != "" && spec.ImplicitNamespaces == v1alpha1.ImplicitLeave {
			skip(ns.Name, "uses "+spec.From+" implicitly ("+m.Implicit+") and spec.implicitNamespaces is Leave")
			continue
		}
		sc.Members = append(sc.Members, m)
	}
	sort.Slice(sc.Skipped, func(i, j int) bool { return sc.Skipped[i].Name < sc.Skipped[j].Name })
	return sc
}

// runsRevision: some live pod runs a sidecar injected by rev.
func runsRevision(pods []corev1.Pod, rev string, tags map[string]string) bool {
	for i := range pods {
		p := &pods[i]
		if !live(p) {
			continue
		}
		if cp, ok := inventory.ClassifyPod(p, inventory.Namespace{Name: p.Namespace}, tags, nil); ok && cp.Mode == inventory.ModeSidecar && cp.Revision == rev {
			return true
		}
	}
	return false
}

// perPodChoice says why labelling an unlabelled namespace would change which
// of its pods get a sidecar, or from which revision ("" when it would not).
func perPodChoice(pods []corev1.Pod) string {
	for i := range pods {
		p := &pods[i]
		if !live(p) {
			continue
		}
		if v, ok := p.Labels[istio.LabelInject]; ok && v != "false" {
			return fmt.Sprintf("pod %s is labelled %s=%s: its pods opt in one by one, and a namespace label would inject every pod", p.Name, istio.LabelInject, v)
		}
		if v, ok := p.Labels[istio.LabelRev]; ok {
			return fmt.Sprintf("pod %s is labelled %s=%s: its pods pick their revision themselves", p.Name, istio.LabelRev, v)
		}
		if p.Labels[istio.LabelInject] == "false" || p.Spec.HostNetwork {
			continue
		}
		if cp, ok := inventory.ClassifyPod(p, inventory.Namespace{Name: p.Namespace}, nil, nil); !ok || cp.Mode != inventory.ModeSidecar {
			return fmt.Sprintf("pod %s has no sidecar and is not labelled %s=false: a namespace label would inject it", p.Name, istio.LabelInject)
		}
	}
	return ""
}

func live(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// adoptedState: the namespace's labels are what the move patches them to.
func adoptedState(l map[string]string, tag string) bool {
	_, inj := l[istio.LabelInjection]
	return l[istio.LabelRev] == tag && !inj
}

// sameOriginal: the namespace's istio.io/rev and istio-injection labels are
// exactly the recorded ones.
func sameOriginal(l, original map[string]string) bool {
	for _, k := range []string{istio.LabelRev, istio.LabelInjection} {
		v, ok := l[k]
		w, want := original[k]
		if ok != want || v != w {
			return false
		}
	}
	return true
}

// Plan reads the cluster once and returns what a migration of spec would
// take if it started now: its scope and its waves. It writes nothing.
func Plan(ctx context.Context, kube kubernetes.Interface, spec v1alpha1.RevisionMigrationSpec, opts inventory.Options) (Scope, []v1alpha1.ResolvedWave, error) {
	spec = Defaulted(spec)
	inv, err := inventory.Observe(ctx, kube, opts)
	if err != nil {
		return Scope{}, nil, err
	}
	nss, err := kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return Scope{}, nil, fmt.Errorf("listing namespaces: %w", err)
	}
	podList, err := kube.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		return Scope{}, nil, fmt.Errorf("listing pods: %w", err)
	}
	pods := map[string][]corev1.Pod{}
	for _, p := range podList.Items {
		pods[p.Namespace] = append(pods[p.Namespace], p)
	}
	istioNS := opts.IstioNamespace
	if istioNS == "" {
		istioNS = istio.DefaultNamespace
	}
	sc := ScopeOf(spec, inv, nss.Items, pods, istioNS)
	var cands []Candidate
	for _, m := range sc.Members {
		cands = append(cands, Candidate{Name: m.Name, Labels: m.Labels})
	}
	return sc, Resolve(spec.Waves, spec.TierLabel, cands), nil
}

// Member returns the member named name.
func (s Scope) Member(name string) (Member, bool) {
	for _, m := range s.Members {
		if m.Name == name {
			return m, true
		}
	}
	return Member{}, false
}
