package model

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// LoadRolloutFile reads a NodeRollout manifest strictly (unknown fields are
// errors) and validates it as the CRD and the orchestrator would. Every
// problem is returned, joined. Field names are matched as encoding/json
// matches them, without case: the case-sensitive check, with each field's
// path, is the CRD schema's (deploy/crds Validator.UnknownFields), which
// the CLI runs first.
func LoadRolloutFile(path string) (*v1alpha1.NodeRollout, Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, Policy{}, fmt.Errorf("reading %s: %w", path, err)
	}
	return ParseRollout(data)
}

// ParseRollout is LoadRolloutFile on bytes.
func ParseRollout(data []byte) (*v1alpha1.NodeRollout, Policy, error) {
	nr := &v1alpha1.NodeRollout{}
	raw := map[string]any{}
	rawErr := yaml.Unmarshal(data, &raw)
	if rawErr == nil {
		if err := yamlBooleans(raw); err != nil {
			return nil, Policy{}, err
		}
	}
	if err := yaml.UnmarshalStrict(data, nr); err != nil {
		return nil, Policy{}, fmt.Errorf("malformed NodeRollout: %s", firstLine(err.Error()))
	}
	var errs []error
	if nr.APIVersion != v1alpha1.GroupVersion.String() || nr.Kind != "NodeRollout" {
		errs = append(errs, fmt.Errorf("apiVersion/kind: want %s NodeRollout, got %q %q", v1alpha1.GroupVersion, nr.APIVersion, nr.Kind))
	}
	if nr.Name == "" {
		errs = append(errs, errors.New("metadata.name: required"))
	}
	if rawErr == nil {
		if err := ValidateRaw(raw); err != nil {
			errs = append(errs, err)
		}
	}
	p, err := NewPolicy(nr.Spec)
	if err != nil {
		errs = append(errs, err)
	}
	return nr, p, errors.Join(errs...)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// yamlBooleans names a policy word that YAML 1.1 (which kubectl and this
// reader speak) read as a boolean: an unquoted Off, On, No or Yes. For
// spec.gates.controlGroup it says which word to write instead; the API
// server would refuse it too, as "must be of type string".
func yamlBooleans(raw map[string]any) error {
	spec, _ := raw["spec"].(map[string]any)
	gates, _ := spec["gates"].(map[string]any)
	if b, ok := gates["controlGroup"].(bool); ok {
		want := map[bool]v1alpha1.ControlGroupPolicy{true: v1alpha1.ControlGroupEnabled, false: v1alpha1.ControlGroupDisabled}[b]
		return fmt.Errorf("spec.gates.controlGroup: YAML reads an unquoted Off/No (On/Yes) as the boolean %v, not a policy; write %s (one of %s, %s)",
			b, want, v1alpha1.ControlGroupEnabled, v1alpha1.ControlGroupDisabled)
	}
	return nil
}
