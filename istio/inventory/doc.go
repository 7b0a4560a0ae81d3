// Package inventory observes which Istio data plane every pod runs: for
// sidecar pods the proxy version and revision, for ambient pods the ztunnel
// of their node; plus the ztunnel and istio-cni versions per node and the
// istiod revisions with their versions and tags. Parsing is pure (parse.go);
// Observe lists the API once; Collector publishes the result as metrics.
package inventory
