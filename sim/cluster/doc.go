// Package cluster runs a simulated Kubernetes cluster made of real upstream
// components — etcd, kube-apiserver (TLS, token authentication, RBAC),
// kube-controller-manager and kube-scheduler — plus simulated nodes and a
// simulated kubelet that moves pods through their lifecycle as far as the API
// can tell. It is the ground every nodewise test and the demo stands on.
//
// Tests call Start, and InstallCRDs for the CRDs they need; the `nodewise
// sim` commands call Up, Attach and Down, which keep the components running in
// the background between invocations, with their PIDs recorded in the state
// directory. InstallCRD is the one way a CRD gets installed, by the tests and
// the demo alike.
package cluster
