// Package health is the judge: it turns node-agent snapshots into before/after
// windows and decides, per pod and per node, whether a swap regressed, with
// the statistics that decision rests on. It reads the agents through the
// SnapshotSource it declares (health/remote implements it over HTTPS); the
// snapshots' shapes are health/wire's.
package health
