// Package sidecar holds the acceptance tests of the sidecar revision waves
// (issue 7) on the simulated cluster: a real kube-apiserver with a test
// injector registered per revision, the real istioctl for tag interop, and
// the RevisionMigration controller run in-process.
//
// Each test starts a cluster and an injector of its own. A test whose outcome
// no timing decides (crash at every step, policy, inventory, bad input, the
// upgrade plan) calls t.Parallel() and runs beside another; a test judged by
// agents over soaks, or that acts inside a wave, a window or a budget, stays
// serial.
package sidecar
