// Package dataplane is a live data plane behind the simulated kubelet: it
// implements cluster.Runtime with real network namespaces, veth links,
// nftables redirection, a ztunnel stand-in process per node that follows
// ztunnel's in-pod listener model and drain deadline, an istio-cni stand-in
// that keeps new pods from starting while it is down, and app pods whose
// clients record their own ground truth.
//
// Every namespace, link and process it creates is named with a per-run
// prefix and removed by Close. Traffic stays inside those namespaces.
package dataplane
