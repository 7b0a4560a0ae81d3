package model

import (
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// Snapshot is the immutable world the planner decides from. fleet.Observer builds
// it from informer caches; tests build it by hand.
type Snapshot struct {
	Nodes   []NodeView
	Targets []TargetView
	// Status is the NodeRollout's status as last persisted.
	Status v1alpha1.NodeRolloutStatus
	// ResumeRequested is true when `nodewise resume` asked to clear a halt.
	ResumeRequested bool
	// UnreadableLocks are other tools' locks nodewise found but could not
	// read (locks.go): no node starts while there is one (fail closed).
	UnreadableLocks []string
	// AlertsBlock says why spec.blocking.alerts hold every start (an alert
	// fires, or the alerts could not be read), "" when they do not.
	AlertsBlock string
	// PromotionHold says what spec.promotion's upstream clusters still
	// lack (read by fleet.Observer), "" when nothing or no promotion.
	PromotionHold string
	// PrecheckHold is what nodewise precheck's checks found before the
	// first start (read by fleet.Observer), "" when nothing.
	PrecheckHold string
}

// TargetView is one target DaemonSet as the planner needs it.
type TargetView struct {
	Ref      v1alpha1.TargetRef
	Found    bool
	UID      types.UID
	Strategy appsv1.DaemonSetUpdateStrategyType
	// NewestHash is the controller-revision-hash of the newest ControllerRevision
	// owned by the DaemonSet (matched by owner UID).
	NewestHash string
	// Images are the images of the DaemonSet's pod template (its
	// containers), the ones a pre-pull pulls, with the template's
	// ImagePullSecrets.
	Images           []string
	ImagePullSecrets []corev1.LocalObjectReference
	// Settled is true once the DaemonSet controller has observed the current
	// template (status.observedGeneration ≥ generation), so its ControllerRevision
	// exists and NewestHash is really the newest.
	Settled bool
}

// Key is "namespace/name".
func (t TargetView) Key() string { return t.Ref.Namespace + "/" + t.Ref.Name }

// OffVersion says which of the template's images does not carry version
// as its tag (or a variant of it, such as 1.28.1-distroless), naming both
// versions; "" when every one does, or version is empty (spec.version).
func (t TargetView) OffVersion(version string) string {
	if version == "" {
		return ""
	}
	for _, img := range t.Images {
		if tag := imageTag(img); tag != version && !strings.HasPrefix(tag, version+"-") {
			if tag == "" {
				tag = "no version tag"
			}
			return fmt.Sprintf("DaemonSet %s's template is at %s (%s), not the pinned version %s: re-apply the reviewed chart, or set spec.version to roll it", t.Key(), tag, img, version)
		}
	}
	return ""
}

// imageTag is an image reference's tag ("istio/ztunnel:1.28.1@sha256:…" →
// "1.28.1"), "" when it has none.
func imageTag(image string) string {
	image, _, _ = strings.Cut(image, "@")
	slash, colon := strings.LastIndex(image, "/"), strings.LastIndex(image, ":")
	if colon <= slash {
		return ""
	}
	return image[colon+1:]
}

// PodView is one target pod on a node.
type PodView struct {
	Name        string
	UID         types.UID
	Hash        string
	Ready       bool
	Terminating bool
}

// NodeView is one node: its placement, schedulability and persisted step.
type NodeView struct {
	Name          string
	Zone          string
	Labels        map[string]string
	Unschedulable bool
	Ready         bool
	// NotReadySince is when the node's Ready condition last turned false
	// (or unknown); zero while it is Ready.
	NotReadySince time.Time
	// Drained: the node is cordoned and runs no pod but DaemonSet and
	// mirror pods (and finished ones): someone else drained it.
	Drained bool
	// State is the node's persisted step for this rollout (nodestep.NodeState: the
	// node's record first, then status).
	State v1alpha1.NodeState
	// Retried: the node is Pending in a record of this rollout, so this
	// rollout started it before (a retry after resume, or an abort before
	// its swap). Being on the newest revisions does not make it Done: it is
	// started again, and passes only through its gate.
	Retried bool
	// HeldBy says why another maintenance tool holds the node (Kured's lock,
	// an SUC plan's job; locks.go), "" when none does. A held node never starts.
	HeldBy string
	// Blocked names a pod matching spec.blocking.podSelector running on
	// the node ("" when none does). A blocked node never starts.
	Blocked string
	// Prepull is the node's pre-pull pod, if there is one (orchestrator/prepull).
	Prepull PrepullView
	// Pods maps a target key to that target's live (non-terminating, if any) pod.
	Pods map[string]PodView
}

// UpToDate is true when every target has a Ready pod on the node at the target's newest revision.
func (n NodeView) UpToDate(targets []TargetView) bool {
	for _, t := range targets {
		p, ok := n.Pods[t.Key()]
		if !ok || p.Terminating || !p.Ready || p.Hash != t.NewestHash || t.NewestHash == "" || !t.Settled {
			return false
		}
	}
	return true
}

// InFlight states are the ones a worker is (or must be) driving.
func InFlight(s v1alpha1.NodeState) bool {
	switch s {
	case "", v1alpha1.NodePending, v1alpha1.NodeDone, v1alpha1.NodeSkipped, v1alpha1.NodeFailed, v1alpha1.NodeRolledBack:
		return false
	}
	return true
}

// Terminal states need nothing more in a forward rollout.
func Terminal(s v1alpha1.NodeState) bool {
	return s == v1alpha1.NodeDone || s == v1alpha1.NodeSkipped
}

// PrepullView is a node's pre-pull pods, one per target: one container per
// new image of the target, bound to the node, whose command does not exist,
// so nothing runs: the kubelet pulls each image before it tries to start the
// container, and the container's state says whether it could.
type PrepullView struct {
	// Exists: the node has a pre-pull pod; Missing: a target with images
	// has none yet (both are created by one ActPrepull).
	Exists, Missing bool
	// Pulled: every target's pod exists and every container got past its
	// pull (running, exited, or failed for a reason other than its image).
	Pulled bool
	// Failed names the image, the node and the kubelet's reason when a pull
	// failed.
	Failed string
}

// NodeEntry is the node's entry in the status, appended (Pending) when it has none.
func NodeEntry(s *v1alpha1.NodeRolloutStatus, node string) *v1alpha1.NodeStatus {
	for i := range s.Nodes {
		if s.Nodes[i].Name == node {
			return &s.Nodes[i]
		}
	}
	s.Nodes = append(s.Nodes, v1alpha1.NodeStatus{Name: node, State: v1alpha1.NodePending})
	return &s.Nodes[len(s.Nodes)-1]
}
