// Package health is the judge: it turns node-agent snapshots into before/after
// windows and decides, per pod and per node, whether a swap regressed. It also
// holds the agent client and the external gate sources, which fail closed.
package health
