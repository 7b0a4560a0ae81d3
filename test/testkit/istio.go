package testkit

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/nodewise/nodewise/sim/istiochart"
)

// IstioManifest renders Istio's charts with the built istioctl
// (`istioctl manifest generate` with args, e.g. "--set", "profile=ambient")
// and returns every object, in order.
func IstioManifest(tb testing.TB, args ...string) []unstructured.Unstructured {
	tb.Helper()
	dir := os.Getenv("NODEWISE_BIN_DIR")
	if dir == "" {
		dir = filepath.Join(RepoRoot(), "bin")
	}
	istioctl := filepath.Join(dir, "istioctl")
	if _, err := os.Stat(istioctl); err != nil {
		tb.Fatalf("istioctl not built (%v): run hack/build-tool.sh istioctl", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	objs, err := istiochart.Render(ctx, istioctl, args...)
	if err != nil {
		tb.Fatal(err)
	}
	return objs
}

// IstioCRD writes Istio's own CustomResourceDefinition name (such as
// "destinationrules.networking.istio.io"), as the built istioctl renders it
// in Istio's base chart, to a file in a test directory and returns its path
// (for cluster.InstallCRDs).
func IstioCRD(tb testing.TB, name string) string {
	tb.Helper()
	for _, u := range IstioManifest(tb, "--set", "profile=ambient") {
		if u.GetKind() != "CustomResourceDefinition" || u.GetName() != name {
			continue
		}
		b, err := yaml.Marshal(u.Object)
		if err != nil {
			tb.Fatal(err)
		}
		path := filepath.Join(tb.TempDir(), name+".yaml")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			tb.Fatal(err)
		}
		return path
	}
	tb.Fatalf("istioctl manifest generate rendered no CustomResourceDefinition %s", name)
	return ""
}
