package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// DrainPolicy says whether a node is drained before its data plane is swapped.
// +kubebuilder:validation:Enum=never;always;auto
type DrainPolicy string

const (
	// DrainNever swaps in place: connections older than ztunnel's drain deadline are reset.
	DrainNever DrainPolicy = "never"
	// DrainAlways evicts the node's pods (Eviction API, PDBs respected) before the swap.
	DrainAlways DrainPolicy = "always"
	// DrainAuto drains only when the node agent sees connections older than the drain
	// deadline, and whenever the agent cannot tell (fail safe); decided per node at
	// its Drain step and persisted (see orchestrator/drainauto.go).
	DrainAuto DrainPolicy = "auto"
)

// PDBBlockedPolicy says what happens when a PodDisruptionBudget keeps a drain from finishing.
// +kubebuilder:validation:Enum=wait;skip-node;halt
type PDBBlockedPolicy string

const (
	// PDBWait keeps retrying the eviction until the budget allows it (no drain timeout).
	PDBWait PDBBlockedPolicy = "wait"
	// PDBSkipNode uncordons the node, marks it Skipped and moves on.
	PDBSkipNode PDBBlockedPolicy = "skip-node"
	// PDBHalt halts the rollout with the blocking budget as the reason.
	PDBHalt PDBBlockedPolicy = "halt"
)

// TargetKind is what a target DaemonSet runs, which decides how it is swapped
// and whether drain policy auto must look for long-lived connections.
// +kubebuilder:validation:Enum=ztunnel;cni
type TargetKind string

const (
	// TargetZtunnel is the ambient node proxy: its swap resets connections
	// older than its drain deadline.
	TargetZtunnel TargetKind = "ztunnel"
	// TargetCNI is the istio-cni node agent.
	TargetCNI TargetKind = "cni"
)

// TargetRef names a DaemonSet the rollout swaps, node by node.
type TargetRef struct {
	// +kubebuilder:validation:MinLength=1
	Namespace string `json:"namespace"`
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Kind is what the DaemonSet runs. Empty: detected from its pod
	// template (Istio's chart labels app=ztunnel or k8s-app=istio-cni-node,
	// else a container image named ztunnel or install-cni). A target whose
	// kind cannot be told keeps the rollout Pending.
	// +optional
	Kind TargetKind `json:"kind,omitempty"`
}

// DrainSpec is the drain policy.
type DrainSpec struct {
	// +kubebuilder:default=never
	// +optional
	Policy DrainPolicy `json:"policy,omitempty"`
	// Timeout bounds a drain (default 5m). With pdbBlocked=wait it is ignored.
	// It must be positive: the drain library reads 0 as "forever", and a drain
	// that never times out never halts or skips its node.
	// +kubebuilder:validation:XValidation:rule="self.matches('[1-9]')",message="drain.timeout must be positive (0 would wait forever); use pdbBlocked: wait to wait for a budget"
	// +optional
	Timeout *Duration `json:"timeout,omitempty"`
	// +kubebuilder:default=halt
	// +optional
	PDBBlocked PDBBlockedPolicy `json:"pdbBlocked,omitempty"`
	// LongLivedAfter is the age from which drain policy auto treats a
	// connection as long-lived (default 5s). The old ztunnel resets every
	// connection still open at its drain deadline, and a connection that has
	// outlived a short request is the kind that will be: auto drains a node
	// whose pods hold one. Ztunnel's drain deadline caps it.
	// +kubebuilder:validation:XValidation:rule="self.matches('[1-9]')",message="drain.longLivedAfter must be positive"
	// +optional
	LongLivedAfter *Duration `json:"longLivedAfter,omitempty"`
}

// Weekday is a three-letter English day name.
// +kubebuilder:validation:Enum=Mon;Tue;Wed;Thu;Fri;Sat;Sun
type Weekday string

// MaintenanceWindow is a daily span, on the listed days, in a time zone. No node
// starts outside every window; a node already in flight finishes. An end
// before the start crosses midnight (22:00–04:00 closes at 04:00 the next
// morning). Times are wall-clock times in TimeZone: on a spring-forward day a
// start or end inside the skipped hour is the moment the clock jumps, and on
// the autumn day a window closes the first time its end is reached (a night
// window holding the repeated hour is an hour longer). See docs/maintenance.md.
// +kubebuilder:validation:XValidation:rule="self.end != self.start",message="window end must differ from its start (an end before the start crosses midnight; 00:00–24:00 is a whole day)"
type MaintenanceWindow struct {
	// Days the window opens on (the day of its start, for a window that
	// crosses midnight); empty means every day.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=7
	Days []Weekday `json:"days,omitempty"`
	// Start is HH:MM (24-hour) in TimeZone.
	// +kubebuilder:validation:MaxLength=5
	// +kubebuilder:validation:Pattern=`^([01][0-9]|2[0-3]):[0-5][0-9]$`
	Start string `json:"start"`
	// End is HH:MM (24-hour) in TimeZone; before Start, it is on the next day.
	// +kubebuilder:validation:MaxLength=5
	// +kubebuilder:validation:Pattern=`^([01][0-9]|2[0-3]):[0-5][0-9]$|^24:00$`
	End string `json:"end"`
	// TimeZone is an IANA name such as Europe/Berlin (default UTC). The CRD
	// checks it by evaluating a CEL timestamp in that zone, which fails for a
	// zone the API server's tz database does not know; the CLI and the
	// orchestrator also check it in Go (time.LoadLocation), since the two tz
	// databases may differ. An unknown zone keeps the rollout Pending (Valid=False).
	// +kubebuilder:validation:XValidation:rule="timestamp('2000-01-01T00:00:00Z').getHours(self) >= 0",message="timeZone is not a known IANA time zone"
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_+\-]+(/[A-Za-z0-9_+\-]+)*$`
	// +optional
	TimeZone string `json:"timeZone,omitempty"`
}

// Blackout is an absolute span, from Start to End (local date-times in
// TimeZone), in which no node starts; nodes in flight finish.
// +kubebuilder:validation:XValidation:rule="self.end > self.start",message="blackout end must be after its start (YYYY-MM-DDTHH:MM)"
type Blackout struct {
	// Start is YYYY-MM-DDTHH:MM (24-hour) in TimeZone.
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:Pattern=`^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]$`
	Start string `json:"start"`
	// End is YYYY-MM-DDTHH:MM (24-hour) in TimeZone, after Start.
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:Pattern=`^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]$`
	End string `json:"end"`
	// TimeZone is an IANA name such as Europe/Berlin (default UTC), checked
	// as a window's is.
	// +kubebuilder:validation:XValidation:rule="timestamp('2000-01-01T00:00:00Z').getHours(self) >= 0",message="timeZone is not a known IANA time zone"
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_+\-]+(/[A-Za-z0-9_+\-]+)*$`
	// +optional
	TimeZone string `json:"timeZone,omitempty"`
	// Reason is shown in status while the blackout holds (e.g. "release freeze").
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Reason string `json:"reason,omitempty"`
}

// CoordinationSpec says how the rollout shares nodes with other
// maintenance: a node held by Kured's lock (the lock annotation on its
// DaemonSet) or worked on by a system-upgrade-controller plan (a running job
// pod labelled with the plan, on that node) is never started while held. See
// docs/maintenance.md.
type CoordinationSpec struct {
	// CountOthers: the rollout's nodes that are unavailable for another
	// reason (cordoned by someone else, held by Kured or an SUC plan) count
	// against maxUnavailable, so two maintenance tools never take the fleet
	// below the budget together (default true).
	// +kubebuilder:default=true
	// +optional
	CountOthers *bool `json:"countOthers,omitempty"`
	// Opportunistic: a node someone else has already cordoned and drained
	// (only DaemonSet pods left) goes first, once the canaries passed, in a
	// free slot; its cordon stays with its owner (default false).
	// +optional
	Opportunistic bool `json:"opportunistic,omitempty"`
	// KuredLock: take (default) holds Kured's lock on Kured's DaemonSet
	// (the orchestrator's --kured-daemonset) while the rollout has a node in
	// flight, so Kured starts no reboot meanwhile, and no node starts while
	// Kured holds it; honour only holds the nodes Kured's lock names. Both
	// read the lock on any DaemonSet. See docs/maintenance.md.
	// +kubebuilder:default=take
	// +optional
	KuredLock KuredLockMode `json:"kuredLock,omitempty"`
}

// KuredLockMode says whether nodewise takes Kured's lock or only honours it.
// +kubebuilder:validation:Enum=take;honour
type KuredLockMode string

const (
	// KuredLockTake holds Kured's lock while a node is in flight.
	KuredLockTake KuredLockMode = "take"
	// KuredLockHonour only holds the nodes Kured's lock names.
	KuredLockHonour KuredLockMode = "honour"
)

// BlockingSpec holds starts while something else says the cluster or a node
// is busy (Kured's --blocking-pod-selector and --prometheus-url alerts). See
// docs/maintenance.md.
// +kubebuilder:validation:XValidation:rule="!has(self.alerts) || size(self.alerts) == 0 || (has(self.prometheusAddress) && size(self.prometheusAddress) > 0)",message="blocking.alerts needs blocking.prometheusAddress"
type BlockingSpec struct {
	// PodSelector: a node does not start while a pod matching it (any
	// namespace, not finished) runs on it; its status reason names the pod.
	// +optional
	PodSelector *metav1.LabelSelector `json:"podSelector,omitempty"`
	// Alerts: no node starts while one of them fires in PrometheusAddress's
	// alerts. Read fail closed: a server that cannot be read holds every start.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	Alerts []BlockingAlert `json:"alerts,omitempty"`
	// PrometheusAddress is the server whose alerts are read, such as
	// http://prometheus.monitoring.svc:9090; the same hosts are allowed as for
	// spec.gates.prometheus.address.
	// +kubebuilder:validation:Pattern=`^https?://`
	// +kubebuilder:validation:MaxLength=512
	// +optional
	PrometheusAddress string `json:"prometheusAddress,omitempty"`
}

// BlockingAlert matches firing alerts by name and, optionally, labels.
type BlockingAlert struct {
	// Name is the alertname.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`
	// Labels the alert must carry with these values (all of them).
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	Labels map[string]string `json:"labels,omitempty"`
}

// NodeRolloutSpec is what to roll and how.
// +kubebuilder:validation:XValidation:rule="!has(self.standing) || !self.standing || !has(self.version)",message="spec.standing and spec.version are exclusive: a standing policy rolls each new revision of its targets as it appears, a pinned rollout only the one version it names; to review each version, leave standing off and apply one pinned NodeRollout per version"
// +kubebuilder:validation:XValidation:rule="!has(self.gates) || !has(self.gates.conformance) || !has(self.gates.conformance.when) || self.gates.conformance.when != 'AfterCanary' || (has(self.canaryNodes) && size(self.canaryNodes) > 0)",message="gates.conformance.when AfterCanary needs spec.canaryNodes"
// +kubebuilder:validation:XValidation:rule="!has(self.standing) || !self.standing || !has(self.rollback) || !self.rollback",message="spec.rollback is for one-shot rollouts: a standing policy rolls a restored template as its next run, judged (revert the chart in Git; after a halt, nodewise resume)"
type NodeRolloutSpec struct {
	// Targets are swapped in this order on each node. Default: istio-system/istio-cni-node,
	// then istio-system/ztunnel (CNI first).
	// +kubebuilder:default={{namespace:"istio-system",name:"istio-cni-node"},{namespace:"istio-system",name:"ztunnel"}}
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=4
	// +optional
	Targets []TargetRef `json:"targets,omitempty"`
	// NodeSelector limits the rollout to matching nodes (default: every node).
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	// CanaryNodes are swapped first, one at a time.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	CanaryNodes []string `json:"canaryNodes,omitempty"`
	// MaxParallel caps a wave. Waves ramp 1, 2, 4 … up to MaxParallel: a
	// number of nodes, or a percentage of the nodes the rollout selects
	// ("10%"), rounded down and at least 1.
	// +kubebuilder:default=1
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^([1-9][0-9]?|100)%$')",message="must be a number of nodes of at least 1, or a percentage from 1% to 100%"
	// +optional
	MaxParallel intstr.IntOrString `json:"maxParallel,omitzero"`
	// MaxUnavailable caps the nodes that are cordoned, mid-swap, failed or
	// halted at once: a number of nodes, or a percentage of the nodes the
	// rollout selects ("5%"), rounded down and at least 1.
	// +kubebuilder:default=1
	// +kubebuilder:validation:XIntOrString
	// +kubebuilder:validation:XValidation:rule="type(self) == int ? self >= 1 : self.matches('^([1-9][0-9]?|100)%$')",message="must be a number of nodes of at least 1, or a percentage from 1% to 100%"
	// +optional
	MaxUnavailable intstr.IntOrString `json:"maxUnavailable,omitzero"`
	// +optional
	Drain DrainSpec `json:"drain,omitempty"`
	// SwapTimeout bounds the wait for a new pod to be Ready on the new revision (default 5m).
	// +kubebuilder:validation:XValidation:rule="self.matches('[1-9]')",message="swapTimeout must be positive"
	// +optional
	SwapTimeout *Duration `json:"swapTimeout,omitempty"`
	// Baseline is the window measured before the swap, the judge's "before"
	// (default 5m; 0s, set explicitly, turns the before/after judgement off).
	// +kubebuilder:default="5m"
	// +optional
	Baseline *Duration `json:"baseline,omitempty"`
	// Soak is how long a node runs on the new revision before its gate, the
	// judge's "after" (default 5m; 0s only when set explicitly). See docs/health.md.
	// +kubebuilder:default="5m"
	// +optional
	Soak *Duration `json:"soak,omitempty"`
	// EnrollmentTimeout bounds the enrollment watchdog of a judged node's
	// soak: once the new pods are Ready (the soak's start), every ambient pod
	// enrolled in the mesh before the swap must be enrolled again (istio-cni's
	// redirection, the new ztunnel's listeners, no bypass) within it, and
	// stay so; else the node fails at once, before the soak ends (default
	// 30s). See docs/enrollment.md.
	// +kubebuilder:validation:XValidation:rule="self.matches('[1-9]')",message="enrollmentTimeout must be positive"
	// +optional
	EnrollmentTimeout *Duration `json:"enrollmentTimeout,omitempty"`
	// MaintenanceWindows: when set, nodes start only inside one of them.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	MaintenanceWindows []MaintenanceWindow `json:"maintenanceWindows,omitempty"`
	// Blackouts are absolute spans, each in its own time zone, in which no node
	// starts, whatever the windows say (a release freeze, a holiday).
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Blackouts []Blackout `json:"blackouts,omitempty"`
	// NotBefore: no node starts before this time (RFC 3339), for a rollout
	// applied in advance.
	// +optional
	NotBefore *metav1.Time `json:"notBefore,omitempty"`
	// NotReadyTimeout: a node NotReady for longer than this before its turn
	// is Skipped, with the reason, so the rollout can complete (default
	// unset: it waits until the node is Ready again).
	// +kubebuilder:validation:XValidation:rule="self.matches('[1-9]')",message="notReadyTimeout must be positive"
	// +optional
	NotReadyTimeout *Duration `json:"notReadyTimeout,omitempty"`
	// Coordination is how the rollout shares the fleet with the cluster's
	// other node maintenance (Kured, system-upgrade-controller, cordons).
	// +optional
	Coordination CoordinationSpec `json:"coordination,omitempty"`
	// Blocking holds starts while matching pods run on a node, or while
	// matching Prometheus alerts fire.
	// +optional
	Blocking BlockingSpec `json:"blocking,omitempty"`
	// Version pins the rollout to one Istio version: every image of every
	// target's template must carry it as its tag (1.28.1, or a variant
	// such as 1.28.1-distroless). A template at another version halts the
	// rollout, naming both, instead of rolling it, and no node done is
	// swapped again. Empty: whatever the templates hold is rolled.
	// +kubebuilder:validation:Pattern=`^[0-9]+\.[0-9]+\.[0-9]+([-+.][0-9A-Za-z.-]+)?$`
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Version string `json:"version,omitempty"`
	// Standing keeps the rollout as a policy: once a run completes it goes
	// Idle and watches its targets, and a template that differs from the
	// one its last run rolled starts the next run, within its windows, with
	// its judge, as a new rollout would. A halted run blocks the next until
	// a person resumes or aborts it. A target that leaves OnDelete stops it
	// (Pending, condition OnDelete False). Each run is recorded in
	// status.runs. Exclusive with spec.version and spec.rollback. See
	// docs/gitops.md.
	// +optional
	Standing bool `json:"standing,omitempty"`
	// Promotion holds the rollout in Pending until the same target images
	// have completed in upstream clusters (staging before production). See
	// docs/clusters.md.
	// +optional
	Promotion *PromotionSpec `json:"promotion,omitempty"`
	// Prepull pulls each node's new target images in a short-lived pod on
	// the node before its turn; a pull that fails halts the rollout before
	// the cordon, naming the image and the node (default false).
	// +optional
	Prepull bool `json:"prepull,omitempty"`
	// Paused stops new nodes from starting; nodes in flight finish.
	// +optional
	Paused bool `json:"paused,omitempty"`
	// Abort stops the rollout once the nodes in flight are made safe (uncordoned).
	// Set by `nodewise abort`; it cannot be undone.
	// +optional
	Abort bool `json:"abort,omitempty"`
	// Rollback swaps the upgraded nodes back, in reverse order, once the user has
	// restored the old template. Set by `nodewise rollback`.
	// +optional
	Rollback bool `json:"rollback,omitempty"`
	// Gates judge each node after its soak.
	// +kubebuilder:validation:XValidation:rule="!has(self.prometheus) || (has(self.prometheus.queries) && size(self.prometheus.queries) > 0)",message="gates.prometheus.queries: a NodeRollout needs at least one query"
	// +kubebuilder:validation:XValidation:rule="!has(self.prometheus) || !has(self.prometheus.builtIn)",message="gates.prometheus.builtIn is for RevisionMigrations only"
	// +kubebuilder:validation:XValidation:rule="!has(self.conformance) || !has(self.conformance.when) || self.conformance.when != 'EveryWave'",message="gates.conformance.when EveryWave is for RevisionMigrations; a NodeRollout takes Start or AfterCanary"
	// +optional
	Gates GatesSpec `json:"gates,omitempty"`
}

// RolloutPhase is where the whole rollout is.
// +kubebuilder:validation:Enum=Pending;Progressing;Paused;WaitingForWindow;Halted;Aborted;Completed;Failed;RollingBack;RolledBack;Idle
type RolloutPhase string

const (
	PhasePending          RolloutPhase = "Pending"
	PhaseProgressing      RolloutPhase = "Progressing"
	PhasePaused           RolloutPhase = "Paused"
	PhaseWaitingForWindow RolloutPhase = "WaitingForWindow"
	PhaseHalted           RolloutPhase = "Halted"
	PhaseAborted          RolloutPhase = "Aborted"
	PhaseCompleted        RolloutPhase = "Completed"
	// PhaseFailed: the rollout cannot run at all (its nodeSelector matches
	// no node); the Valid condition says why. A spec change wakes it.
	PhaseFailed      RolloutPhase = "Failed"
	PhaseRollingBack RolloutPhase = "RollingBack"
	PhaseRolledBack  RolloutPhase = "RolledBack"
	// PhaseIdle: a standing policy between runs: its last run completed,
	// and it watches its targets for the next revision (spec.standing).
	PhaseIdle RolloutPhase = "Idle"
)

// NodeState is one node's step. Every in-flight state is persisted before it is acted on.
type NodeState string

const (
	NodePending      NodeState = "Pending"
	NodePreflight    NodeState = "Preflight"
	NodeCordon       NodeState = "Cordon"
	NodeDrain        NodeState = "Drain"
	NodeSwapCNI      NodeState = "SwapCNI"
	NodeSwapZtunnel  NodeState = "SwapZtunnel"
	NodeWaitReady    NodeState = "WaitReady"
	NodeUncordon     NodeState = "Uncordon"
	NodeSoak         NodeState = "Soak"
	NodeGate         NodeState = "Gate"
	NodeDone         NodeState = "Done"
	NodeSkipped      NodeState = "Skipped"
	NodeFailed       NodeState = "Failed"
	NodeRolledBack   NodeState = "RolledBack"
	NodeAbortCleanup NodeState = "AbortCleanup"
)

// NodeStatus is one node's entry in the rollout status.
type NodeStatus struct {
	Name string `json:"name"`
	// +optional
	Zone string `json:"zone,omitempty"`
	// +optional
	Canary bool `json:"canary,omitempty"`
	// Wave is the planned wave, counted from 1.
	// +optional
	Wave  int32     `json:"wave,omitempty"`
	State NodeState `json:"state"`
	// StateSince is when the node entered State.
	// +optional
	StateSince *metav1.Time `json:"stateSince,omitempty"`
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	FinishTime *metav1.Time `json:"finishTime,omitempty"`
	// +optional
	Reason string `json:"reason,omitempty"`
	// Verdict is the gate's outcome and its headline, one line naming the
	// worst failing evidence first ("Fail: probe: resets sent 0/s → 3.1/s
	// (p<0.001)"), or what a pass rests on. Conditions, events, the CLI,
	// the notifications and the dashboard lead with it.
	// +optional
	Verdict string `json:"verdict,omitempty"`
	// Detail is every reason behind Verdict as the gate gave them: the
	// failing evidence, the checks that passed, the control group, the
	// baseline's source, notes on the agents' clocks. `nodewise explain`
	// lists it under the before/after table.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	Detail []string `json:"detail,omitempty"`
	// Judgement is the judge's before/after summary behind Verdict (absent
	// for gates without numbers); `nodewise explain` prints it.
	// +optional
	Judgement *NodeJudgement `json:"judgement,omitempty"`
	// Baseline is the judge's record of the node's baseline samples and of
	// its soak's first sample (base64 of gzipped JSON, at most 32 KiB), for
	// the pods it kept: written at the cordon and again when the soak
	// starts, cleared when the node leaves flight. A successor leader judges
	// the node from it instead of failing it for a baseline it never saw.
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	Baseline string `json:"baseline,omitempty"`
	// Controls is the judge's record of the node's control nodes: of each,
	// the first and last baseline samples and the soak's first, for the
	// most connected pods across the group (base64 of gzipped JSON, at most
	// 16 KiB), written and cleared with Baseline. A successor leader judges
	// the node against its control group from it; without it, before/after
	// alone.
	// +optional
	// +kubebuilder:validation:MaxLength=16384
	Controls string `json:"controls,omitempty"`
}

// RolloutCounts sums the node entries.
type RolloutCounts struct {
	Total      int32 `json:"total"`
	Pending    int32 `json:"pending"`
	InProgress int32 `json:"inProgress"`
	Done       int32 `json:"done"`
	Skipped    int32 `json:"skipped"`
	Failed     int32 `json:"failed"`
	RolledBack int32 `json:"rolledBack"`
}

// PromotionSpec names the upstream clusters a NodeRollout or a
// RevisionMigration follows. A rollout starts only once, in each of them, a
// NodeRollout rolled the same target images to Completed at least SoakAfter
// ago, judged at least as strictly, and no rollout of those images is
// Halted there; a migration, once a RevisionMigration there moved to the
// same istiod version and Succeeded likewise, none to it Halted or Refused.
// An upstream that cannot be read holds it (fail closed).
type PromotionSpec struct {
	// Upstreams are the clusters, each read with the kubeconfig in a Secret
	// of the controller's namespace.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=name
	Upstreams []Upstream `json:"upstreams"`
	// SoakAfter is how long ago the upstream's rollout must have completed,
	// or its migration succeeded (default 24h).
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]')",message="soakAfter must be a duration such as 24h"
	// +optional
	SoakAfter *Duration `json:"soakAfter,omitempty"`
}

// Upstream is one cluster a rollout or a migration is promoted from.
type Upstream struct {
	// Name names the cluster in reasons and status.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// KubeconfigSecret is a Secret in the controller's namespace holding
	// a read-only kubeconfig of the cluster under data key "value" (Cluster
	// API's) or "kubeconfig".
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	KubeconfigSecret string `json:"kubeconfigSecret"`
}

// TargetStatus is what the rollout observed of one target.
type TargetStatus struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Revision is the controller-revision-hash of the newest ControllerRevision owned by the DaemonSet.
	// +optional
	Revision string `json:"revision,omitempty"`
	// Images are the images of that revision's pod template: what another
	// cluster's rollout is promoted on (spec.promotion).
	// +optional
	// +kubebuilder:validation:MaxItems=16
	Images []string `json:"images,omitempty"`
}

// NodeRolloutStatus is where the rollout is.
type NodeRolloutStatus struct {
	// +optional
	Phase RolloutPhase `json:"phase,omitempty"`
	// ObservedGeneration is the generation of the spec the orchestrator last
	// acted on. It reads 0 until its first pass (a default: kstatus, and so
	// Flux, takes an object without it for one that is done).
	// +optional
	// +kubebuilder:default=0
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	HaltReason string `json:"haltReason,omitempty"`
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// +optional
	Targets []TargetStatus `json:"targets,omitempty"`
	// +optional
	Counts RolloutCounts `json:"counts,omitempty"`
	// Omitted counts, by state, the nodes that have no entry in Nodes: the
	// status is degraded. With every entry it would be over its budget
	// (896 KiB for its JSON and the API server's record of its fields, so
	// the object stays under 1 MiB, below etcd's 1.5 MiB request limit),
	// so the entries needed least went first: passed nodes (oldest first),
	// then Pending ones, then Skipped ones; the entries of nodes in flight
	// and failed stay. Counts counts every node. Each node's progress is
	// also its own record, on its annotations. Absent while every node has
	// its entry.
	// +optional
	Omitted *RolloutCounts `json:"omitted,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=name
	Nodes []NodeStatus `json:"nodes,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Requests are the last request of each verb (pause, resume, abort,
	// rollback, skip, retry): who asked, as the API server authenticated
	// them, and when the orchestrator took it in. Each is also an Event
	// (PauseRequested, ResumeRequested, ...) naming who asked.
	// +optional
	// +listType=map
	// +listMapKey=verb
	// +kubebuilder:validation:MaxItems=6
	Requests []VerbRequest `json:"requests,omitempty"`
	// Runs are a standing policy's runs, newest first, the last
	// MaxRuns of them: the current one while it is under way (or halted),
	// then the finished ones.
	// +optional
	// +kubebuilder:validation:MaxItems=10
	Runs []RunRecord `json:"runs,omitempty"`
	// Conformance is the last run of spec.gates.conformance's Job.
	// +optional
	Conformance *ConformanceStatus `json:"conformance,omitempty"`
}

// MaxRuns bounds status.runs.
const MaxRuns = 10

// RunRecord is one run of a standing policy: the revisions it rolled and
// how it went.
type RunRecord struct {
	// Run counts the policy's runs from 1.
	Run int64 `json:"run"`
	// Targets are the revisions and images the run rolls.
	// +optional
	// +kubebuilder:validation:MaxItems=4
	Targets []TargetStatus `json:"targets,omitempty"`
	// Outcome is the run's phase: Completed or Aborted once it ended,
	// else where it is (Progressing, Halted, WaitingForWindow, ...).
	Outcome RolloutPhase `json:"outcome"`
	// Reason is the run's last headline: the halt reason, or what it did.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Reason string `json:"reason,omitempty"`
	// StartTime is when the policy took the run's revisions.
	StartTime metav1.Time `json:"startTime"`
	// CompletionTime is when the run ended.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
}

// The abort rule sits on the object, not on spec or spec.abort: a
// transition rule does not run when the field it sits on is removed, so a
// merge patch {"spec":{"abort":null}} or {"spec":null} would undo it there.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.spec) || !has(oldSelf.spec.abort) || !oldSelf.spec.abort || (has(self.spec) && has(self.spec.abort) && self.spec.abort)",message="abort cannot be undone"

// NodeRollout rolls the ambient data plane (istio-cni, ztunnel) node by node.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=nr,categories=nodewise
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Done",type=integer,JSONPath=`.status.counts.done`
// +kubebuilder:printcolumn:name="Total",type=integer,JSONPath=`.status.counts.total`
// +kubebuilder:printcolumn:name="In-Flight",type=integer,JSONPath=`.status.counts.inProgress`
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.counts.failed`
// +kubebuilder:printcolumn:name="Standing",type=boolean,JSONPath=`.spec.standing`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.haltReason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NodeRollout struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +kubebuilder:validation:Required
	Spec NodeRolloutSpec `json:"spec"`
	// Status is where the rollout is; defaulted (observedGeneration 0) so that
	// a rollout nothing acted on yet is not taken for a finished one.
	// +optional
	// +kubebuilder:default={}
	Status NodeRolloutStatus `json:"status,omitempty"`
}

// NodeRolloutList is a list of NodeRollouts.
// +kubebuilder:object:root=true
type NodeRolloutList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeRollout `json:"items"`
}
