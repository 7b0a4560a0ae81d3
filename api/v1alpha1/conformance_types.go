package v1alpha1

import (
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultConformanceTimeout and DefaultConformanceLogLines are
// gates.conformance.timeout's and logLines' defaults.
const (
	DefaultConformanceTimeout  = 10 * time.Minute
	DefaultConformanceLogLines = 5
)

// ConformanceGate runs a user-supplied Job (a conformance suite against the
// new revision, as Argo Rollouts' Job provider does) at fixed points of a
// rollout or migration: the Job's success passes the point, its failure or
// timeout halts with the Job's name and its last log lines. The Job is
// created in Namespace, owned by the NodeRollout or RevisionMigration (so
// deleting that deletes its Jobs), and named after the point it gates and
// the attempt, so a restarted controller finds it instead of creating a
// second one. A passed Job is deleted; the last failed one is kept to read.
//
// +kubebuilder:validation:XValidation:rule="!has(self.timeout) || (self.timeout.matches('[1-9]') && duration(self.timeout) >= duration('1s'))",message="gates.conformance.timeout must be a positive duration of at least 1s, such as 10m"
type ConformanceGate struct {
	// Namespace is where the Job runs (the controller needs to create Jobs
	// and read pod logs there: the chart grants it cluster-wide).
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// JobTemplate is the Job's metadata (labels, annotations) and spec, as
	// in a CronJob's jobTemplate. Its schema is left open in the CRD (a
	// full pod template would make the CRD too large for kubectl apply);
	// the controller checks it against the API server with a dry-run
	// create before anything moves, and refuses a Job the server would
	// refuse. Every container gets NODEWISE_STEP (the point gated, such as
	// start) and the revision or version moved to in its environment.
	// activeDeadlineSeconds is capped at Timeout.
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	JobTemplate batchv1.JobTemplateSpec `json:"jobTemplate"`
	// Timeout bounds one run, from the Job's creation to its Complete or
	// Failed condition (default 10m). A run past it halts.
	// +optional
	Timeout *Duration `json:"timeout,omitempty"`
	// When says at which points the Job runs: Start (default) once before
	// the first wave or node; EveryWave (RevisionMigration) also before each
	// later wave, once the previous one passed its gate; AfterCanary
	// (NodeRollout, with canaryNodes) also once the canary nodes passed,
	// before any other node starts.
	// +kubebuilder:validation:Enum=Start;EveryWave;AfterCanary
	// +optional
	When ConformanceWhen `json:"when,omitempty"`
	// LogLines is how many of the failed pod's last log lines the halt
	// reason quotes (default 5).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=50
	// +optional
	LogLines int32 `json:"logLines,omitempty"`
}

// ConformanceWhen says at which points a conformance Job runs (see
// ConformanceGate.When).
type ConformanceWhen string

// The conformance points.
const (
	ConformanceStart       ConformanceWhen = "Start"
	ConformanceEveryWave   ConformanceWhen = "EveryWave"
	ConformanceAfterCanary ConformanceWhen = "AfterCanary"
)

// ConformanceOutcome is how a conformance run ended, or Running.
// +kubebuilder:validation:Enum=Running;Passed;Failed
type ConformanceOutcome string

// The conformance outcomes.
const (
	ConformanceRunning ConformanceOutcome = "Running"
	ConformancePassed  ConformanceOutcome = "Passed"
	ConformanceFailed  ConformanceOutcome = "Failed"
)

// ConformanceStatus is the last conformance run: written before its Job is
// created, so a restarted controller looks for that Job by name.
type ConformanceStatus struct {
	// Step is the point the run gates: start, wave-<n> (before wave n of a
	// migration) or after-canary.
	Step string `json:"step"`
	// Attempt counts the runs of Step (a resume after a failed run starts
	// the next attempt).
	Attempt int32 `json:"attempt"`
	// Job is the Job's name, in Namespace.
	Job       string `json:"job"`
	Namespace string `json:"namespace"`
	// StartedAt is when the run was recorded; its timeout counts from here.
	StartedAt metav1.Time `json:"startedAt"`
	// +optional
	Outcome ConformanceOutcome `json:"outcome,omitempty"`
	// Message says how the run ended: for a failure, the Job's reason and
	// the last log lines of its pod (or why none could be read).
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`
}

// Line is the run in one line, as nodewise's status and explain print it:
// the point, the attempt, the Job and how it went, with a failure's message
// (its first line).
func (c *ConformanceStatus) Line() string {
	line := fmt.Sprintf("conformance %s (attempt %d): Job %s/%s %s", c.Step, c.Attempt, c.Namespace, c.Job, c.Outcome)
	if c.Outcome == ConformanceFailed && c.Message != "" {
		msg, _, _ := strings.Cut(c.Message, "\n")
		line += ": " + msg
	}
	return line
}
