// Package v1alpha1 holds nodewise's custom resources: NodeRollout (the ambient
// node-by-node rollout) and RevisionMigration (sidecar namespaces moving between
// Istio revisions).
//
// +kubebuilder:object:generate=true
// +groupName=nodewise.io
package v1alpha1

// Deepcopy code and the CRD manifests in deploy/crds are generated from these types.
//go:generate go tool -modfile=../../tools/controller-gen/go.mod controller-gen object paths=./ crd output:crd:artifacts:config=../../deploy/crds
