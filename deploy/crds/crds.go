// Package crds embeds nodewise's generated CustomResourceDefinitions and
// validates objects against them offline, in the API server's order:
// metadata, defaults, the OpenAPI schema, list-type sets and the CEL rules.
// `nodewise plan --offline` uses it, so it refuses what the server would.
package crds

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/objectmeta"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

//go:embed nodewise.io_*.yaml
var files embed.FS

// Validator checks objects of one kind as the API server would on create.
type Validator struct {
	namespaced bool
	structural *structuralschema.Structural
	openapi    validation.SchemaValidator
	rules      *cel.Validator
}

// ForKind builds the Validator of a nodewise kind from its embedded CRD
// (first served version).
func ForKind(kind string) (*Validator, error) {
	crd, err := find(kind)
	if err != nil {
		return nil, err
	}
	for _, v := range crd.Spec.Versions {
		if !v.Served || v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
			continue
		}
		var internal apiextensions.JSONSchemaProps
		if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, &internal, nil); err != nil {
			return nil, fmt.Errorf("CRD %s: converting the schema: %w", crd.Name, err)
		}
		s, err := structuralschema.NewStructural(&internal)
		if err != nil {
			return nil, fmt.Errorf("CRD %s: the schema is not structural: %w", crd.Name, err)
		}
		openapi, _, err := validation.NewSchemaValidator(&internal)
		if err != nil {
			return nil, fmt.Errorf("CRD %s: building the schema validator: %w", crd.Name, err)
		}
		return &Validator{
			namespaced: crd.Spec.Scope == apiextensionsv1.NamespaceScoped,
			structural: s,
			openapi:    openapi,
			rules:      cel.NewValidator(s, true, celconfig.PerCallLimit),
		}, nil
	}
	return nil, fmt.Errorf("CRD of %s has no served version with a schema", kind)
}

func find(kind string) (*apiextensionsv1.CustomResourceDefinition, error) {
	names, err := fs.Glob(files, "*.yaml")
	if err != nil {
		return nil, err
	}
	for _, n := range names {
		data, err := files.ReadFile(n)
		if err != nil {
			return nil, err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(data, crd); err != nil {
			return nil, fmt.Errorf("embedded CRD %s: %w", n, err)
		}
		if crd.Spec.Names.Kind == kind {
			return crd, nil
		}
	}
	return nil, fmt.Errorf("no embedded CRD for kind %s", kind)
}

// Validate applies the schema's defaults to obj (in place, as the server
// does before validating) and returns every problem the server would report.
func (v *Validator) Validate(ctx context.Context, obj map[string]any) field.ErrorList {
	var errs field.ErrorList
	meta := metav1.ObjectMeta{}
	if raw, ok := obj["metadata"]; ok {
		b, err := json.Marshal(raw)
		if err == nil {
			err = json.Unmarshal(b, &meta)
		}
		if err != nil {
			return field.ErrorList{field.Invalid(field.NewPath("metadata"), raw, err.Error())}
		}
	}
	errs = append(errs, apimachineryvalidation.ValidateObjectMeta(&meta, v.namespaced, apimachineryvalidation.NameIsDNSSubdomain, field.NewPath("metadata"))...)
	serverNumbers(obj)
	structuraldefaulting.Default(obj, v.structural)
	errs = append(errs, validation.ValidateCustomResource(nil, obj, v.openapi)...)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, v.structural, obj)...)
	if !blocking(errs) { // as the server: CEL rules need fields of the right shape
		celErrs, _ := v.rules.Validate(ctx, nil, v.structural, obj, nil, celconfig.RuntimeCELCostBudget)
		errs = append(errs, celErrs...)
	}
	return errs
}

// blocking reports the errors after which the API server skips the CEL rules.
func blocking(errs field.ErrorList) bool {
	for _, e := range errs {
		switch e.Type {
		case field.ErrorTypeNotSupported, field.ErrorTypeRequired, field.ErrorTypeTooLong, field.ErrorTypeTooMany, field.ErrorTypeTypeInvalid:
			return true
		}
	}
	return false
}

// UnknownFields lists the fields of obj the schema does not name, with their
// paths ("spec.maintenanceWindows[0].timezone"), as the API server's strict
// field validation reports them: metadata read by a case-sensitive strict
// decode, then every other field pruned against the structural schema, so a
// name must match in case too. obj is left as it was.
func (v *Validator) UnknownFields(obj map[string]any) ([]string, error) {
	_, _, unknown, err := objectmeta.GetObjectMetaWithOptions(obj, objectmeta.ObjectMetaOptions{ReturnUnknownFieldPaths: true})
	if err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	pruned := pruning.PruneWithOptions(runtime.DeepCopyJSON(obj), v.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	return append(unknown, pruned...), nil
}

// Suggest is the field the schema names at path's place whose name differs
// from path's last segment only in case ("timeZone" for
// "spec.maintenanceWindows[0].timezone"), or "" when there is none.
func (v *Validator) Suggest(path string) string {
	segs := strings.Split(path, ".")
	s := v.structural
	for _, seg := range segs[:len(segs)-1] {
		name, _, _ := strings.Cut(seg, "[")
		s = child(s, name)
		for range strings.Count(seg, "[") { // each [i] steps into a list's items
			if s != nil {
				s = s.Items
			}
		}
		if s == nil {
			return ""
		}
	}
	last := segs[len(segs)-1]
	for name := range s.Properties {
		if strings.EqualFold(name, last) {
			return name
		}
	}
	return ""
}

// child is the schema of s's field name: a named property, else the schema
// of a map's values.
func child(s *structuralschema.Structural, name string) *structuralschema.Structural {
	if s == nil {
		return nil
	}
	if p, ok := s.Properties[name]; ok {
		return &p
	}
	if s.AdditionalProperties != nil {
		return s.AdditionalProperties.Structural
	}
	return nil
}

// serverNumbers turns each whole float64 in obj (as encoding/json and YAML
// decode every number) into the int64 the API server's decoder makes of it,
// in place: an int-or-string field's rules, and integer schemas, read int64.
func serverNumbers(obj any) any {
	switch o := obj.(type) {
	case map[string]any:
		for k, v := range o {
			o[k] = serverNumbers(v)
		}
	case []any:
		for i, v := range o {
			o[i] = serverNumbers(v)
		}
	case float64:
		if i := int64(o); float64(i) == o {
			return i
		}
	}
	return obj
}
