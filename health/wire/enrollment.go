package wire

import (
	"fmt"
	"time"
)

// EnrollmentResult is one ambient pod's standing in the mesh.
type EnrollmentResult string

const (
	// Enrolled: every check passed.
	Enrolled EnrollmentResult = "enrolled"
	// NotEnrolled: a check failed (PodEnrollment.Failed names it).
	NotEnrolled EnrollmentResult = "not-enrolled"
	// NotCheckable: the agent could not look (PodEnrollment.Detail says why).
	NotCheckable EnrollmentResult = "not-checkable"
)

// EnrollmentCheck names one of the checks of a pod's enrollment.
type EnrollmentCheck string

const (
	// CheckRedirection: istio-cni's redirect rules are in the pod's netns.
	CheckRedirection EnrollmentCheck = "redirection"
	// CheckListeners: the running ztunnel listens in the pod's netns on
	// 15001, 15006 and 15008.
	CheckListeners EnrollmentCheck = "listeners"
	// CheckBypass: none of the pod's open outbound connections goes
	// straight to a peer instead of through ztunnel's outbound listener.
	CheckBypass EnrollmentCheck = "bypass"
)

// PodEnrollment is one ambient pod's enrollment as a node agent saw it.
type PodEnrollment struct {
	Namespace string           `json:"namespace"`
	Name      string           `json:"name"`
	UID       string           `json:"uid"`
	Result    EnrollmentResult `json:"result"`
	// Failed is the first check that failed (NotEnrolled only).
	Failed EnrollmentCheck `json:"failed,omitempty"`
	// Detail says what the failed check found, or why the pod could not be checked.
	Detail string `json:"detail,omitempty"`
}

// Key is the pod's namespace/name.
func (p PodEnrollment) Key() string { return p.Namespace + "/" + p.Name }

// String is "ns/name enrolled", "ns/name not enrolled (listeners: …)" or
// "ns/name not checkable (…)".
func (p PodEnrollment) String() string {
	switch p.Result {
	case Enrolled:
		return p.Key() + " enrolled"
	case NotEnrolled:
		return fmt.Sprintf("%s not enrolled (%s: %s)", p.Key(), p.Failed, p.Detail)
	}
	return fmt.Sprintf("%s not checkable (%s)", p.Key(), p.Detail)
}

// Enrollment is every ambient pod's enrollment on one node at one time (the
// field of Snapshot a node agent fills when it checks enrollment).
type Enrollment struct {
	Time time.Time `json:"time"`
	// Ztunnel names the ztunnel process the listeners were matched
	// against ("pid 4242"); empty when none runs on the node.
	Ztunnel string          `json:"ztunnel,omitempty"`
	Pods    []PodEnrollment `json:"pods"`
	// Error says why the agent could not check at all (it could not list
	// the ambient pods or find ztunnel): the gate fails closed on it.
	Error string `json:"error,omitempty"`
}

// Count returns how many pods are enrolled, out of all the ambient pods.
func (e *Enrollment) Count() (enrolled, total int) {
	if e == nil {
		return 0, 0
	}
	for _, p := range e.Pods {
		if p.Result == Enrolled {
			enrolled++
		}
	}
	return enrolled, len(e.Pods)
}
