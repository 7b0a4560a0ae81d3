package worker

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/observe"
)

// CNIChecker asks a node's agent for istio-cni's own health on its node
// (the agent's /v1/cni): remote.Agent. version is the plugin version
// expected ("" compares none).
type CNIChecker interface {
	CNI(ctx context.Context, node, version string) (wire.CNIHealth, error)
}

// cniCheck asks the node agents for istio-cni's health, in rollouts with an
// istio-cni target: before the cordon and after the swap. With no agents
// (nil: the readiness gate's) nothing is checked.
type cniCheck struct {
	agents CNIChecker
	pods   observe.PodCache
}

// cniTarget is the rollout's istio-cni target, if it has one: the rollouts
// the istio-cni check runs in (before the cordon and after the swap).
func cniTarget(p model.Policy) (v1alpha1.TargetRef, bool) {
	for _, t := range p.Targets {
		if t.Kind == v1alpha1.TargetCNI {
			return t, true
		}
	}
	return v1alpha1.TargetRef{}, false
}

// cniResult is what checkCNI found: the problems (none: healthy) with
// their headline, or for a healthy node what was checked. ran is false
// when there was nothing to check.
type cniResult struct {
	problems          []string
	headline, summary string
	ran               bool
}

// checkCNI asks the node's agent for istio-cni's health, expecting the
// plugin version of the target's pod now on the node (the old one before
// the swap, the new one after). Nothing runs without agents (the readiness
// gate) or an istio-cni target. An agent that does not answer is a
// problem: the check fails closed.
func (c cniCheck) checkCNI(ctx context.Context, p model.Policy, node string) cniResult {
	t, ok := cniTarget(p)
	if c.agents == nil || !ok {
		return cniResult{}
	}
	version, why := c.cniVersion(t, node)
	h, err := c.agents.CNI(ctx, node, version)
	if err != nil {
		problem := fmt.Sprintf("istio-cni on node %s cannot be checked: %v", node, err)
		return cniResult{problems: []string{problem}, headline: health.Cut(fmt.Sprintf("istio-cni cannot be checked: %v", err), health.HeadlineMax), ran: true}
	}
	if !h.OK() {
		return cniResult{problems: h.Problems(), headline: health.Cut(h.Headline(), health.HeadlineMax), ran: true}
	}
	summary := h.Summary()
	if why != "" {
		summary += " (" + why + ")"
	}
	return cniResult{summary: summary, ran: true}
}

// cniBeforeCordon halts the node before its cordon when istio-cni is not
// healthy on it, naming the node, the check and the file.
func (c cniCheck) cniBeforeCordon(ctx context.Context, p model.Policy, node string) error {
	if r := c.checkCNI(ctx, p, node); len(r.problems) > 0 {
		return nodestep.Halt(nodestep.HaltPreflightFailed, "preflight: %s", strings.Join(r.problems, "; "))
	}
	return nil
}

// cniAfterSwap adds istio-cni's health after the swap to the gate's
// verdict: a failed check fails the node whatever the traffic said, and
// leads (what the gate alone said is kept in the reasons); a passed one
// is reported.
func (c cniCheck) cniAfterSwap(ctx context.Context, p model.Policy, node string, v health.Verdict) health.Verdict {
	r := c.checkCNI(ctx, p, node)
	switch {
	case !r.ran:
		return v
	case len(r.problems) == 0:
		v.Reasons = append(v.Reasons, r.summary)
		return v
	}
	return overruled(v, r.headline, r.problems)
}

// overruled is v failed by a check made beside the gate (readiness,
// istio-cni): the check's headline leads, its problems come first in the
// reasons, then what the gate alone said and its reasons.
func overruled(v health.Verdict, headline string, problems []string) health.Verdict {
	reasons := append(append([]string(nil), problems...), "(the gate alone said: "+v.Line()+")")
	v.Outcome, v.Headline, v.Reasons = health.Fail, headline, append(reasons, v.Reasons...)
	return v
}

// cniVersion is the plugin version the istio-cni target's pod now on the
// node should have installed: its image's tag without Istio's variant
// suffix (1.28.1-distroless → 1.28.1). "" with the reason when it cannot
// tell (no such pod, an image by digest): the version found is then
// reported, not compared.
func (c cniCheck) cniVersion(t v1alpha1.TargetRef, node string) (string, string) {
	pods, err := c.pods.OnNode(node)
	if err != nil {
		return "", fmt.Sprintf("plugin version not compared: listing the pods on the node: %v", err)
	}
	var newest *corev1.Pod
	for _, pod := range pods {
		if pod.Namespace != t.Namespace || pod.DeletionTimestamp != nil || !ownedByDaemonSet(pod, t.Name) {
			continue
		}
		if newest == nil || newest.CreationTimestamp.Before(&pod.CreationTimestamp) {
			newest = pod
		}
	}
	if newest == nil || len(newest.Spec.Containers) == 0 {
		return "", fmt.Sprintf("plugin version not compared: no pod of %s/%s on the node", t.Namespace, t.Name)
	}
	image := newest.Spec.Containers[0].Image
	if v := imageVersion(image); v != "" {
		return v, ""
	}
	return "", fmt.Sprintf("plugin version not compared: image %s has no tag", image)
}

func ownedByDaemonSet(pod *corev1.Pod, name string) bool {
	for _, o := range pod.OwnerReferences {
		if o.Kind == "DaemonSet" && o.Name == name {
			return true
		}
	}
	return false
}

// imageVersion is an image's tag without Istio's variant suffixes, "" for
// an image by digest or without a tag.
func imageVersion(image string) string {
	if strings.Contains(image, "@") {
		return ""
	}
	i := strings.LastIndex(image, ":")
	if i < 0 || strings.Contains(image[i:], "/") {
		return ""
	}
	tag := image[i+1:]
	for _, variant := range []string{"-distroless", "-debug"} {
		tag = strings.TrimSuffix(tag, variant)
	}
	return tag
}
