package model

import (
	"errors"
	"fmt"
	"path"
	"strings"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// DetectKind tells what a data-plane DaemonSet runs from its pod template:
// Istio's chart labels first, then the container images' names. It never
// guesses from the DaemonSet's own name. Empty when it cannot tell (not a
// data-plane DaemonSet, or both).
func DetectKind(ds *appsv1.DaemonSet) v1alpha1.TargetKind {
	l := ds.Spec.Template.Labels
	switch {
	case l["app"] == "ztunnel" || l["app.kubernetes.io/name"] == "ztunnel":
		return v1alpha1.TargetZtunnel
	case l["k8s-app"] == "istio-cni-node" || l["app.kubernetes.io/name"] == "istio-cni":
		return v1alpha1.TargetCNI
	}
	var kind v1alpha1.TargetKind
	for _, c := range ds.Spec.Template.Spec.Containers {
		var k v1alpha1.TargetKind
		switch imageName(c.Image) {
		case "ztunnel":
			k = v1alpha1.TargetZtunnel
		case "install-cni":
			k = v1alpha1.TargetCNI
		default:
			continue
		}
		if kind != "" && kind != k {
			return "" // both: cannot tell
		}
		kind = k
	}
	return kind
}

// imageName is an image reference's last path element without tag or digest:
// "docker.io/istio/ztunnel:1.28.1" → "ztunnel".
func imageName(image string) string {
	if i := strings.Index(image, "@"); i >= 0 {
		image = image[:i]
	}
	base := path.Base(image)
	if i := strings.Index(base, ":"); i >= 0 {
		base = base[:i]
	}
	return base
}

// TypeTargets fills each target's kind (spec first, else detected from the
// DaemonSet the cache holds) and checks that no two targets share one: each
// kind has one swap step. A target not found is left to ValidateTargets.
func TypeTargets(p Policy, get func(ns, name string) (*appsv1.DaemonSet, error)) (Policy, error) {
	typed := make([]v1alpha1.TargetRef, len(p.Targets))
	seen := map[v1alpha1.TargetKind]string{}
	var errs []error
	for i, t := range p.Targets {
		if t.Kind == "" {
			if ds, err := get(t.Namespace, t.Name); err == nil && ds != nil {
				if t.Kind = DetectKind(ds); t.Kind == "" {
					errs = append(errs, fmt.Errorf("spec.targets[%d]: cannot tell what DaemonSet %s/%s runs (no app=ztunnel or k8s-app=istio-cni-node label, no ztunnel or install-cni image): set kind: ztunnel or kind: cni", i, t.Namespace, t.Name))
				}
			}
		}
		if t.Kind != "" {
			if other, dup := seen[t.Kind]; dup {
				errs = append(errs, fmt.Errorf("spec.targets[%d]: %s/%s and %s are both %s targets: a rollout swaps one of each kind", i, t.Namespace, t.Name, other, t.Kind))
			}
			seen[t.Kind] = t.Namespace + "/" + t.Name
		}
		typed[i] = t
	}
	p.Targets = typed
	return p, errors.Join(errs...)
}
