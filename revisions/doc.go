// Package revisions is the RevisionMigration controller: it moves sidecar
// namespaces from one istiod revision to another through a revision tag, in
// gated waves. A wave's namespaces are retagged (istio.io/rev=<tag>) and their
// Deployments, StatefulSets and DaemonSets restarted through the
// kubectl.kubernetes.io/restartedAt annotation, rate-limited in pods per
// second and never past a PodDisruptionBudget. A wave passes when its pods are
// Ready on the new proxy version and the external gate passes. Abort retags
// moved namespaces back and restarts them.
//
// Every step is written to the RevisionMigration's status before it is acted
// on, so a restarted controller resumes from the API alone: a workload whose
// template already carries the namespace's recorded restartedAt stamp is never
// patched again.
package revisions
