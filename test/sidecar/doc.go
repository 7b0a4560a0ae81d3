// Package sidecar holds the acceptance tests of the sidecar revision waves
// (issue 7) on the simulated cluster: a real kube-apiserver with a test
// injector registered per revision, the real istioctl for tag interop, and
// the RevisionMigration controller run in-process.
//
// Each test starts a cluster and an injector of its own, one at a time: the
// package runs beside test/e2e, whose serial tests bound lease and lock
// renewals in seconds, and two clusters here at once delay those renewals.
package sidecar
