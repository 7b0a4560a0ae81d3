package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of every nodewise resource.
var GroupVersion = schema.GroupVersion{Group: "nodewise.io", Version: "v1alpha1"}

var (
	// SchemeBuilder registers both kinds of the group.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds every nodewise type to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// addKnownTypes lists the kinds explicitly (no init-time registration), so
// Scheme, built at package initialisation, holds them.
func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &NodeRollout{}, &NodeRolloutList{}, &RevisionMigration{}, &RevisionMigrationList{}, &PodAgePolicy{}, &PodAgePolicyList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
