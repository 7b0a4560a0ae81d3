package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultMigrationTag is the revision tag a RevisionMigration moves namespaces onto.
const DefaultMigrationTag = "canary"

// DefaultTierLabel is the namespace label that orders namespaces into waves.
const DefaultTierLabel = "nodewise.io/tier"

// WaveSelector selects namespaces by label equality. It is deliberately a
// matchLabels-only selector: two selector waves must be provably disjoint
// (some key they both name has different values), which the API server can
// check with CEL. Expressions would make overlap undecidable up front.
type WaveSelector struct {
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=4
	MatchLabels map[string]LabelValue `json:"matchLabels"`
}

// LabelValue is a Kubernetes label value.
// +kubebuilder:validation:MaxLength=63
type LabelValue string

// Wave is one step of a migration: either the namespaces a selector matches,
// or a cumulative percentage of the in-scope namespaces in tier order.
// +kubebuilder:validation:XValidation:rule="has(self.namespaceSelector) != has(self.percent)",message="a wave sets exactly one of namespaceSelector or percent"
type Wave struct {
	// Name identifies the wave in status and events.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// NamespaceSelector picks the wave's namespaces among those not moved yet.
	// +optional
	NamespaceSelector *WaveSelector `json:"namespaceSelector,omitempty"`
	// Percent is cumulative: after this wave, at least this share of the
	// in-scope namespaces (in tier order, rounded up, at least one) has moved.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	Percent *int32 `json:"percent,omitempty"`
}

// RevisionMigrationSpec says which sidecar namespaces move from one istiod
// revision to another, through which tag, in which waves and how fast.
// +kubebuilder:validation:XValidation:rule="self.from != self.to",message="from and to must be different revisions"
// +kubebuilder:validation:XValidation:rule="!has(self.waypointCanaryWeights) || (has(self.waypoints) && self.waypoints == 'Only')",message="waypointCanaryWeights is for a waypoints: Only migration"
// +kubebuilder:validation:XValidation:rule="!has(self.waypoints) || self.waypoints != 'Only' || !has(self.stableTag)",message="stableTag hands sidecar namespaces over to a tag: a waypoints: Only migration has none"
// +kubebuilder:validation:XValidation:rule="!has(self.stableTag) || (self.stableTag != self.from && self.stableTag != self.to && (!has(self.tag) || self.stableTag != self.tag))",message="stableTag must differ from tag, from and to"
// +kubebuilder:validation:XValidation:rule="!has(self.waves) || self.waves.all(a, self.waves.all(b, a.name == b.name || !has(a.namespaceSelector) || !has(b.namespaceSelector) || a.namespaceSelector.matchLabels.exists(k, k in b.namespaceSelector.matchLabels && a.namespaceSelector.matchLabels[k] != b.namespaceSelector.matchLabels[k])))",message="wave namespace selectors overlap: every two selector waves must name a common label key with different values"
// +kubebuilder:validation:XValidation:rule="!has(self.waves) || self.waves.all(a, self.waves.all(b, !has(a.percent) || !has(b.percent) || self.waves.indexOf(a) >= self.waves.indexOf(b) || a.percent < b.percent))",message="percent waves must strictly increase"
type RevisionMigrationSpec struct {
	// From is the istiod revision the namespaces use now (e.g. 1-27).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	From string `json:"from"`
	// To is the istiod revision they move to (e.g. 1-28). It must be installed.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	To string `json:"to"`
	// Tag is the revision tag pointed at To; moved namespaces get istio.io/rev=<tag>.
	// +kubebuilder:default=canary
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self != 'default'",message="the default tag is not a migration tag: pick another name (default canary)"
	// +optional
	Tag string `json:"tag,omitempty"`
	// StableTag is where the moved namespaces end. Once the migration
	// Succeeded, the controller points this tag at To (creating it if need
	// be) and puts each moved namespace on it, restarting nothing (the
	// revision stays To): a namespace whose original labels named this tag
	// gets them back, any other gets istio.io/rev=<stableTag>. Condition
	// TagHandedOver records it. Tag then points at To with no namespace on
	// it, free for the next migration. Unset: the namespaces stay on Tag.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self != 'default'",message="stableTag cannot be the default tag: move it with istiod's Helm defaultRevision or nodewise tag set default"
	// +optional
	StableTag string `json:"stableTag,omitempty"`
	// TierLabel is the namespace label that orders namespaces (lowest tier first).
	// +kubebuilder:default="nodewise.io/tier"
	// +optional
	TierLabel string `json:"tierLabel,omitempty"`
	// Waves in order. Empty means: canary (the first namespace in tier order), 5%, 30%, 100%.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Waves []Wave `json:"waves,omitempty"`
	// RateLimit bounds how fast pods are restarted, to stay within istiod's
	// certificate-issuance headroom.
	RateLimit RestartRateLimit `json:"rateLimit"`
	// ImplicitNamespaces says what to do with namespaces that use From
	// without naming it: istio-injection=enabled, or no label while the
	// default tag points at From. Adopt (the default) makes each explicit in
	// one recorded patch (istio.io/rev=<tag>, istio-injection removed) and
	// moves it; an abort restores its original labels exactly. Leave reports
	// them in status.skipped and moves none.
	// +kubebuilder:default=Adopt
	// +optional
	ImplicitNamespaces ImplicitPolicy `json:"implicitNamespaces,omitempty"`
	// Gates are the judge's external gates run after each wave is Ready,
	// and the conformance Job run before the first wave (and, with
	// conformance.when EveryWave, before each later one).
	// +kubebuilder:validation:XValidation:rule="!has(self.conformance) || !has(self.conformance.when) || self.conformance.when != 'AfterCanary'",message="gates.conformance.when AfterCanary is for NodeRollouts; a RevisionMigration takes Start or EveryWave"
	// +optional
	Gates *GatesSpec `json:"gates,omitempty"`
	// Abort rolls moved namespaces back to their original labels and
	// restarts them: "wave" only the current wave's (earlier waves stay on
	// To), "all" every namespace moved so far. Widening wave to all while the
	// rollback is in flight is allowed; an abort is never undone.
	// +optional
	Abort AbortScope `json:"abort,omitempty"`
	// Paused stops the migration before its next wave: the wave in flight
	// finishes (restart, soak, gate), no namespace of a later wave is
	// retagged until paused is false again. An abort still proceeds.
	// +optional
	Paused bool `json:"paused,omitempty"`
	// Promotion holds the migration in Pending until a RevisionMigration to
	// the same istiod version has succeeded in upstream clusters (staging
	// before production). See docs/clusters.md.
	// +optional
	Promotion *PromotionSpec `json:"promotion,omitempty"`
	// Waypoints says what moves: Exclude (the default) the sidecar
	// namespaces; Only the ambient waypoints on From: each waypoint
	// Gateway's istio.io/rev is set to To (its original recorded first; an
	// abort puts it back), istiod rolls its Deployment, and the wave's
	// namespaces (the waypoints' own: their backends) are judged like a
	// sidecar wave. Waves group waypoints by their namespace's tier.
	// +optional
	Waypoints WaypointsMode `json:"waypoints,omitempty"`
	// WaypointCanaryWeights are the steps of a waypoint's weighted canary
	// (waypoints: Only, where the installed Istio supports it: see
	// status.waypointMethod): the percentage of its users' new connections
	// sent to the canary waypoint on To, each step judged as a wave is,
	// strictly increasing and ending at 100. Empty means 10, 50, 100.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=5
	// +kubebuilder:validation:items:Minimum=1
	// +kubebuilder:validation:items:Maximum=100
	// +kubebuilder:validation:XValidation:rule="self.all(a, self.indexOf(a) == self.lastIndexOf(a) && self.all(b, self.indexOf(a) >= self.indexOf(b) || a < b))",message="waypointCanaryWeights must strictly increase"
	// +kubebuilder:validation:XValidation:rule="self[size(self) - 1] == 100",message="waypointCanaryWeights must end at 100 (the canary takes every connection before the primary is promoted)"
	// +optional
	WaypointCanaryWeights []int32 `json:"waypointCanaryWeights,omitempty"`
}

// WaypointMethod is how a waypoints: Only migration moves each waypoint.
// +kubebuilder:validation:Enum=Canary;Relabel
type WaypointMethod string

const (
	// WaypointCanary: a canary Gateway on To beside the primary, its users'
	// connections shifted to it by weight, then the primary relabelled and
	// the canary removed.
	WaypointCanary WaypointMethod = "Canary"
	// WaypointRelabel: the primary Gateway's istio.io/rev set to To in place.
	WaypointRelabel WaypointMethod = "Relabel"
)

// WaypointUser is an object whose istio.io/use-waypoint names a moved
// waypoint: a Namespace or a Service.
type WaypointUser struct {
	// Kind is Namespace or Service.
	// +kubebuilder:validation:Enum=Namespace;Service
	Kind string `json:"kind"`
	// Namespace is a Service's namespace (empty for a Namespace).
	// +optional
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// Waypoint is the primary Gateway it uses (in the status entry's namespace).
	Waypoint string `json:"waypoint"`
}

// WaypointsMode says whether a migration moves sidecar namespaces or waypoints.
// +kubebuilder:validation:Enum=Exclude;Only
type WaypointsMode string

const (
	WaypointsExclude WaypointsMode = "Exclude"
	WaypointsOnly    WaypointsMode = "Only"
)

// ImplicitPolicy says whether a migration adopts namespaces that use From implicitly.
// +kubebuilder:validation:Enum=Adopt;Leave
type ImplicitPolicy string

const (
	ImplicitAdopt ImplicitPolicy = "Adopt"
	ImplicitLeave ImplicitPolicy = "Leave"
)

// AbortScope says how much of a migration an abort rolls back.
// +kubebuilder:validation:Enum=wave;all
type AbortScope string

const (
	// AbortWave rolls back only the namespaces of the current wave.
	AbortWave AbortScope = "wave"
	// AbortAll rolls back every namespace moved so far.
	AbortAll AbortScope = "all"
)

// RestartRateLimit is a pod restart budget.
type RestartRateLimit struct {
	// PodsPerSecond is the most pods restarted per second, cluster-wide for this migration.
	// +kubebuilder:validation:XValidation:rule="self > 0",message="rateLimit.podsPerSecond must be greater than 0"
	PodsPerSecond int32 `json:"podsPerSecond"`
}

// MigrationPhase is where a migration is.
// +kubebuilder:validation:Enum=Pending;Progressing;Gating;Paused;Succeeded;Halted;Aborting;Aborted;Refused
type MigrationPhase string

const (
	MigrationPending     MigrationPhase = "Pending"
	MigrationProgressing MigrationPhase = "Progressing"
	MigrationGating      MigrationPhase = "Gating"
	// MigrationPaused: spec.paused holds the migration between two waves.
	MigrationPaused    MigrationPhase = "Paused"
	MigrationSucceeded MigrationPhase = "Succeeded"
	MigrationHalted    MigrationPhase = "Halted"
	MigrationAborting  MigrationPhase = "Aborting"
	MigrationAborted   MigrationPhase = "Aborted"
	// MigrationRefused means the controller will not start: an unknown
	// revision, or a move outside the supported skew. The reason says which.
	MigrationRefused MigrationPhase = "Refused"
)

// NamespacePhase is where one namespace is.
// +kubebuilder:validation:Enum=Pending;Retagging;Retagged;Restarting;Ready;Reverting;RolledBack;Skipped
type NamespacePhase string

const (
	NamespacePending NamespacePhase = "Pending"
	// NamespaceRetagging: its original labels are recorded and the patch to
	// istio.io/rev=<tag> may or may not have been applied yet.
	NamespaceRetagging  NamespacePhase = "Retagging"
	NamespaceRetagged   NamespacePhase = "Retagged"
	NamespaceRestarting NamespacePhase = "Restarting"
	NamespaceReady      NamespacePhase = "Ready"
	// NamespaceReverting: abort retagged it back and its restart is in flight.
	NamespaceReverting  NamespacePhase = "Reverting"
	NamespaceRolledBack NamespacePhase = "RolledBack"
	// NamespaceSkipped: when its wave came, the namespace no longer used
	// From (its labels changed since the migration started); it is left alone.
	NamespaceSkipped NamespacePhase = "Skipped"
)

// NamespaceStatus is one namespace's progress. Everything a restarted
// controller needs to continue without restarting a namespace twice is here.
type NamespaceStatus struct {
	Name string `json:"name"`
	// Wave is the index of the wave the namespace belongs to.
	Wave int32 `json:"wave"`
	// OriginalRev is the namespace's istio.io/rev value before the move (restored on abort).
	OriginalRev string `json:"originalRev"`
	// Adopted: the namespace used From implicitly (istio-injection=enabled,
	// or no label under the default tag) and the move made it explicit.
	// +optional
	Adopted bool `json:"adopted,omitempty"`
	// OriginalLabels are the namespace's istio.io/rev and istio-injection
	// labels (those it had; an absent key is absent here) recorded before its
	// labels were patched. An abort restores exactly these.
	// +optional
	OriginalLabels map[string]string `json:"originalLabels,omitempty"`
	// Waypoints (waypoints: Only) are the namespace's waypoint Gateways the
	// migration moves, each with its istio.io/rev label recorded before it
	// was changed ("" when it had none). An abort restores exactly these.
	// +optional
	Waypoints map[string]string `json:"waypoints,omitempty"`
	// Canaries (status.waypointMethod Canary) name each moved Gateway's
	// canary Gateway, recorded before it is created.
	// +optional
	Canaries map[string]string `json:"canaries,omitempty"`
	// WaypointUsers (status.waypointMethod Canary) are the objects that use
	// the moved Gateways, recorded before any is pointed at a canary: an
	// abort or the promotion removes their canary label and weight.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	WaypointUsers []WaypointUser `json:"waypointUsers,omitempty"`
	// +optional
	Phase NamespacePhase `json:"phase,omitempty"`
	// RestartedAt is the kubectl.kubernetes.io/restartedAt value stamped on the
	// namespace's workloads. It is written here before any workload is patched;
	// a workload already carrying it is never patched again.
	// +optional
	RestartedAt string `json:"restartedAt,omitempty"`
	// Generation counts the restarts of this namespace by this migration
	// (1 after the move, 2 after an abort's restart).
	// +optional
	Generation int32 `json:"generation,omitempty"`
	// Pods is how many pods the namespace's restart covers.
	// +optional
	Pods int32 `json:"pods,omitempty"`
	// Message says what the namespace waits for.
	// +optional
	Message string `json:"message,omitempty"`
}

// RevisionMigrationStatus is where the migration is.
type RevisionMigrationStatus struct {
	// +optional
	Phase MigrationPhase `json:"phase,omitempty"`
	// Reason explains the phase, for people.
	// +optional
	Reason string `json:"reason,omitempty"`
	// CurrentWave is the index of the wave in flight.
	// +optional
	CurrentWave int32 `json:"currentWave,omitempty"`
	// Waves is the resolved plan: the namespaces of each wave, fixed at start.
	// +optional
	Waves []ResolvedWave `json:"waves,omitempty"`
	// +optional
	Namespaces []NamespaceStatus `json:"namespaces,omitempty"`
	// Skipped are the namespaces that use From but that the migration leaves
	// alone, each with the reason (never silently).
	// +optional
	// +listType=map
	// +listMapKey=name
	Skipped []SkippedNamespace `json:"skipped,omitempty"`
	// ObservedGeneration is the generation of the spec the controller last
	// acted on. It reads 0 until its first pass (a default: kstatus, and so
	// Flux, takes an object without it for one that is done).
	// +optional
	// +kubebuilder:default=0
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// StartedAt is when the migration started; WaveStartedAt when the current wave did.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// +optional
	WaveStartedAt *metav1.Time `json:"waveStartedAt,omitempty"`
	// CompletedAt is when the migration Succeeded.
	// +optional
	CompletedAt *metav1.Time `json:"completedAt,omitempty"`
	// ToVersion is the istiod version of To (its image tag) as the
	// migration found it when it started: what another cluster's migration
	// is promoted on (spec.promotion), since revision names differ per
	// cluster.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	ToVersion string `json:"toVersion,omitempty"`
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ResumeToken is the last nodewise.io/resume-token annotation the
	// controller acted on (a new value clears a halt: the halted wave is
	// judged again from a fresh soak).
	// +optional
	ResumeToken string `json:"resumeToken,omitempty"`
	// Conformance is the last run of spec.gates.conformance's Job.
	// +optional
	Conformance *ConformanceStatus `json:"conformance,omitempty"`
	// WaypointMethod is how a waypoints: Only migration moves its
	// waypoints, decided when it starts from the installed Istio: Canary
	// when the istiod of To and every ztunnel are 1.31 or later, else Relabel.
	// +optional
	WaypointMethod WaypointMethod `json:"waypointMethod,omitempty"`
}

// SkippedNamespace is a namespace using From that a migration does not move.
type SkippedNamespace struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// ResolvedWave is a wave with its namespaces fixed.
type ResolvedWave struct {
	Name string `json:"name"`
	// +optional
	Namespaces []string `json:"namespaces,omitempty"`
	// ReadyAt is when every namespace of the wave was first Ready on the new
	// proxy: the gate's soak starts there.
	// +optional
	ReadyAt *metav1.Time `json:"readyAt,omitempty"`
	// Judgement is the wave's last gate judgement, the table that
	// `nodewise revision explain` prints.
	// +optional
	Judgement *WaveJudgement `json:"judgement,omitempty"`
	// CanaryWeight (status.waypointMethod Canary) is the canary weight the
	// wave's waypoint users carry, recorded before they are patched; each
	// weight is judged from a fresh soak.
	// +optional
	CanaryWeight int32 `json:"canaryWeight,omitempty"`
	// CanaryPromoted: every weight passed; the primary Gateways move to To
	// (recorded before their labels change), then the canaries are removed.
	// +optional
	CanaryPromoted bool `json:"canaryPromoted,omitempty"`
}

// WaveJudgement is a wave's gate judgement: the outcome, why, and the rows
// behind it (migrated pods against the not-yet-migrated ones over the same
// interval, and each migrated workload against its own baseline).
type WaveJudgement struct {
	Outcome string `json:"outcome"`
	// JudgedAt is when (RFC 3339).
	JudgedAt string `json:"judgedAt"`
	// +optional
	// +kubebuilder:validation:MaxItems=16
	Reasons []string `json:"reasons,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Rows []JudgementRow `json:"rows,omitempty"`
}

// RevisionMigration moves sidecar namespaces between istiod revisions in gated waves.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=revmig,categories=nodewise
// +kubebuilder:printcolumn:name="From",type=string,JSONPath=`.spec.from`
// +kubebuilder:printcolumn:name="To",type=string,JSONPath=`.spec.to`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Wave",type=integer,JSONPath=`.status.currentWave`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type RevisionMigration struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec RevisionMigrationSpec `json:"spec"`
	// Status is where the migration is; defaulted (observedGeneration 0) so that
	// a migration nothing acted on yet is not taken for a finished one.
	// +optional
	// +kubebuilder:default={}
	Status RevisionMigrationStatus `json:"status,omitempty"`
}

// RevisionMigrationList is a list of RevisionMigrations.
// +kubebuilder:object:root=true
type RevisionMigrationList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []RevisionMigration `json:"items"`
}
