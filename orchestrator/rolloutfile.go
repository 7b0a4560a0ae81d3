package orchestrator

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
// problem is returned, joined.
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
	raw := map[string]any{}
	if err := yaml.Unmarshal(data, &raw); err == nil {
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

// OneLine flattens a joined error for a one-line CLI message.
func OneLine(err error) string { return oneLine(err) }

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
