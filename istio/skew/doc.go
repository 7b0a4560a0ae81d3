// Package skew is Istio's version-skew support policy as one overridable
// table, the check that lists data-plane components outside it, and the
// planner that splits a control-plane jump into passes the policy allows.
//
// Everything here is pure: callers bring the versions (package inventory
// observes them), skew decides.
package skew
