package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of every nodewise resource.
var GroupVersion = schema.GroupVersion{Group: "nodewise.io", Version: "v1alpha1"}

var (
	// SchemeBuilder collects the types each *_types.go file registers in its init.
	SchemeBuilder = runtime.NewSchemeBuilder(addMetaTypes)
	// AddToScheme adds every nodewise type to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

var knownTypes []runtime.Object

// register is called from each *_types.go file's init with its kinds.
func register(objs ...runtime.Object) { knownTypes = append(knownTypes, objs...) }

func addMetaTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, knownTypes...)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
