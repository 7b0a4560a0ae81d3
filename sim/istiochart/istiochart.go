// Package istiochart renders Istio's Helm charts with the built istioctl,
// for the simulated cluster's real istiod and for tests that run Istio's own
// manifests.
package istiochart

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// Render renders Istio's charts with the istioctl at path
// (`istioctl manifest generate` with args: "--set", "profile=ambient", or
// "-f", an IstioOperator file) and returns every object, in order. The charts
// are the ones compiled into that istioctl, so nothing is read from the Go
// module cache.
func Render(ctx context.Context, istioctl string, args ...string) ([]unstructured.Unstructured, error) {
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, istioctl, append([]string{"manifest", "generate"}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("istioctl manifest generate: %w\n%s", err, errOut.String())
	}
	var objs []unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(&out, 4096)
	for {
		var u unstructured.Unstructured
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading the rendered manifest: %w", err)
		}
		if u.Object != nil {
			objs = append(objs, u)
		}
	}
}
