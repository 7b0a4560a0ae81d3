// Package remote reads the judge's evidence from outside the orchestrator:
// node agents' snapshots, history and istio-cni health over HTTPS (Agent),
// and PromQL queries (Prometheus, and PrometheusGate, which implements the
// judge's ExternalGate). Both go through a retrying client and an
// AddressPolicy that bounds the addresses a gate may reach; every failure to
// read is an error the judge fails closed on.
package remote
