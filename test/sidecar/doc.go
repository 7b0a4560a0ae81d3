// Package sidecar holds the acceptance tests of the sidecar revision waves
// (issue 7) on the simulated cluster: a real kube-apiserver with a test
// injector registered per revision, the real istioctl for tag interop, and
// the RevisionMigration controller run in-process.
package sidecar
