package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AnnotationMaxAgeOptOutUntil on a Deployment, StatefulSet, DaemonSet or
// bare pod keeps a PodAgePolicy from restarting it until the RFC 3339 time
// it holds; a time past, or a value that is not one, protects nothing.
const AnnotationMaxAgeOptOutUntil = "nodewise.io/max-age-opt-out-until"

// PodAgePolicySpec says which sidecar workloads must be restarted, when and
// how fast: those whose oldest pod is older than MaxAge, or whose proxy is
// more than MaxMinorsBehind minors behind the designated version.
// +kubebuilder:validation:XValidation:rule="has(self.maxAge) || has(self.maxMinorsBehind)",message="set maxAge, maxMinorsBehind or both: a policy needs a target"
type PodAgePolicySpec struct {
	// NamespaceSelector picks the namespaces the policy covers (empty: every
	// namespace with sidecar pods, istio-system and kube-* excepted).
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// MaxAge is the oldest a pod may be (for example 720h).
	// +optional
	MaxAge *Duration `json:"maxAge,omitempty"`
	// MaxMinorsBehind: a proxy more minors behind the designated version
	// (the default tag's revision) than this misses the target.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=10
	// +optional
	MaxMinorsBehind *int32 `json:"maxMinorsBehind,omitempty"`
	// MaintenanceWindows: restarts start only inside one of them (none: any
	// time), as a NodeRollout's nodes do.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	MaintenanceWindows []MaintenanceWindow `json:"maintenanceWindows,omitempty"`
	// Blackouts are spans in which no restart starts, whatever the windows say.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Blackouts []Blackout `json:"blackouts,omitempty"`
	// Notice is how long before its restart a workload's owners are told
	// (default 72h); no workload restarts before its notice was sent and
	// this much time has passed.
	// +optional
	Notice *Duration `json:"notice,omitempty"`
	// Routes send each team's notices to its own webhook; teams without a
	// route get the controller's default webhook.
	// +optional
	// +listType=map
	// +listMapKey=team
	// +kubebuilder:validation:MaxItems=256
	Routes []NoticeRoute `json:"routes,omitempty"`
	// TeamKey and OwnerKey name the label or annotation carrying a
	// workload's team and owner (the workload's first, then its namespace's).
	// +kubebuilder:default=team
	// +kubebuilder:validation:MaxLength=253
	// +optional
	TeamKey string `json:"teamKey,omitempty"`
	// +kubebuilder:default=owner
	// +kubebuilder:validation:MaxLength=253
	// +optional
	OwnerKey string `json:"ownerKey,omitempty"`
	// RateLimit bounds the restarts, in pods per second, cluster-wide and
	// in each namespace.
	RateLimit PodAgeRateLimit `json:"rateLimit"`
	// WaveSize is the most workloads restarted in one wave (default 5): a
	// wave is judged by the node agents before the next one starts.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	WaveSize int32 `json:"waveSize,omitempty"`
	// Gates are the judge's external gates, run on each wave as on a
	// migration's. A conformance Job is not run by a PodAgePolicy: its
	// restarts change no version to test.
	// +kubebuilder:validation:XValidation:rule="!has(self.conformance)",message="gates.conformance is for a RevisionMigration or a NodeRollout: a PodAgePolicy moves no version to test"
	// +optional
	Gates *GatesSpec `json:"gates,omitempty"`
	// Paused: no new wave starts; the wave in flight finishes.
	// +optional
	Paused bool `json:"paused,omitempty"`
	// Abort stops the policy for good: nothing more is restarted (`nodewise
	// podage abort`). Any non-empty value.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Abort string `json:"abort,omitempty"`
}

// NoticeRoute is one team's notice webhook: the URL is read from a Secret
// in the controller's namespace.
type NoticeRoute struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Team string `json:"team"`
	// Secret and Key name the Secret entry that holds the webhook URL.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Secret string `json:"secret"`
	// +kubebuilder:default=url
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Key string `json:"key,omitempty"`
}

// PodAgeRateLimit is a pod restart budget in two scopes.
type PodAgeRateLimit struct {
	// PodsPerSecond is the most pods restarted per second, cluster-wide.
	// +kubebuilder:validation:XValidation:rule="self > 0",message="rateLimit.podsPerSecond must be greater than 0"
	PodsPerSecond int32 `json:"podsPerSecond"`
	// NamespacePodsPerSecond is the most per second in one namespace
	// (default: PodsPerSecond).
	// +kubebuilder:validation:Minimum=1
	// +optional
	NamespacePodsPerSecond int32 `json:"namespacePodsPerSecond,omitempty"`
}

// PodAgePhase is where a policy is.
// +kubebuilder:validation:Enum=Waiting;Restarting;Gating;Paused;Halted;Aborted;Invalid
type PodAgePhase string

// Phases of a PodAgePolicy.
const (
	// PodAgeWaiting: no wave in flight; notices go out, restarts wait for
	// their notice, a window, or a workload to miss the target.
	PodAgeWaiting    PodAgePhase = "Waiting"
	PodAgeRestarting PodAgePhase = "Restarting"
	PodAgeGating     PodAgePhase = "Gating"
	PodAgePaused     PodAgePhase = "Paused"
	PodAgeHalted     PodAgePhase = "Halted"
	PodAgeAborted    PodAgePhase = "Aborted"
	PodAgeInvalid    PodAgePhase = "Invalid"
)

// PodAgeWorkloadState is where one workload is in its policy's hands.
// +kubebuilder:validation:Enum=Noticed;Restarting;Restarted;Blocked;OptedOut
type PodAgeWorkloadState string

// States of a workload under a PodAgePolicy.
const (
	WorkloadNoticed    PodAgeWorkloadState = "Noticed"
	WorkloadRestarting PodAgeWorkloadState = "Restarting"
	WorkloadRestarted  PodAgeWorkloadState = "Restarted"
	WorkloadBlocked    PodAgeWorkloadState = "Blocked"
	WorkloadOptedOut   PodAgeWorkloadState = "OptedOut"
)

// PodAgeWorkload is one workload that missed the target, as the policy
// handles it. A restart is recorded here (State Restarting, RestartedAt)
// before it is made, so a restarted controller never restarts it twice.
type PodAgeWorkload struct {
	Namespace string `json:"namespace"`
	// Kind is Deployment, StatefulSet, DaemonSet or Pod (a bare pod: evicted).
	Kind  string `json:"kind"`
	Name  string `json:"name"`
	Team  string `json:"team,omitempty"`
	Owner string `json:"owner,omitempty"`
	// Why it missed the target ("oldest pod 31d, max 30d").
	Why   string              `json:"why,omitempty"`
	State PodAgeWorkloadState `json:"state"`
	// NoticeSentAt is when its owners were told; it restarts no earlier
	// than this plus spec.notice.
	NoticeSentAt *metav1.Time `json:"noticeSentAt,omitempty"`
	// RestartedAt is the restart's stamp (the template's restartedAt), or
	// the time of a bare pod's eviction.
	RestartedAt string `json:"restartedAt,omitempty"`
	// Wave is the wave it was restarted in.
	Wave int32 `json:"wave,omitempty"`
	// OptOutUntil is its opt-out annotation's time while it protects.
	OptOutUntil *metav1.Time `json:"optOutUntil,omitempty"`
	Message     string       `json:"message,omitempty"`
}

// PodAgePolicyStatus is where the policy is. Workloads is the one record of
// each workload's notice and restart.
type PodAgePolicyStatus struct {
	Phase  PodAgePhase `json:"phase,omitempty"`
	Reason string      `json:"reason,omitempty"`
	// Wave counts the waves started; the current one is judged once its
	// workloads are settled.
	Wave          int32        `json:"wave,omitempty"`
	WaveStartedAt *metav1.Time `json:"waveStartedAt,omitempty"`
	WaveReadyAt   *metav1.Time `json:"waveReadyAt,omitempty"`
	// Judgement is the last wave's verdict and table.
	Judgement *WaveJudgement `json:"judgement,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxItems=5000
	Workloads []PodAgeWorkload `json:"workloads,omitempty"`
	// NextWindow is when restarts may next start, when outside the windows.
	NextWindow         *metav1.Time       `json:"nextWindow,omitempty"`
	ResumeToken        string             `json:"resumeToken,omitempty"`
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
}

// PodAgePolicy publishes and enforces a maximum pod age and a proxy version
// target: inside its maintenance windows it restarts the sidecar workloads
// that miss them, after telling their owners, within PDBs and a rate limit,
// in waves the node agents judge. See docs/freshness.md.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=pap,categories=nodewise
// +kubebuilder:printcolumn:name="Max-Age",type=string,JSONPath=`.spec.maxAge`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Wave",type=integer,JSONPath=`.status.wave`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PodAgePolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PodAgePolicySpec   `json:"spec"`
	Status PodAgePolicyStatus `json:"status,omitempty"`
}

// PodAgePolicyList is a list of PodAgePolicies.
// +kubebuilder:object:root=true
type PodAgePolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PodAgePolicy `json:"items"`
}
