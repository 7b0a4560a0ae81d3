// Package chart renders nodewise's Helm chart (deploy/charts/nodewise) and its
// kustomize base (deploy/) into objects, and applies them server-side, so tests
// can check the two agree and that the API server accepts what they install.
package chart

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/nodewise/nodewise/test/testkit"
)

// Namespace is where the kustomize base installs, and the release namespace
// the chart is rendered into.
const Namespace = "nodewise-system"

// AgentNamespace is where the chart and the kustomize base run the node
// agents (agent.namespace): their own namespace, at Pod Security level
// privileged.
const AgentNamespace = "nodewise-agent"

// AgentUser is the agents' ServiceAccount username, the only requester of
// their certificates the orchestrator's signer approves (its --agent-namespace).
const AgentUser = "system:serviceaccount:" + AgentNamespace + ":nodewise-agent"

// namespaceOf is the namespace of a chart component's pods and
// ServiceAccount (app: its app.kubernetes.io/name).
func namespaceOf(app string) string {
	if app == "nodewise-agent" {
		return AgentNamespace
	}
	return Namespace
}

// KubeVersion is the Kubernetes version `helm template` renders for (the
// simulated cluster's minor): Helm built from its module has no default.
const KubeVersion = "1.37.0"

// ChartDir is deploy/charts/nodewise.
func ChartDir() string { return filepath.Join(testkit.RepoRoot(), "deploy", "charts", "nodewise") }

// Helm finds the helm binary that `make chart-check` builds (hack/build-tool.sh
// helm): in $NODEWISE_BIN_DIR, else the repository's bin/.
func Helm() (string, error) { return Tool("helm") }

// Tool finds a pinned tool's binary (make tools, make chart-check) in
// $NODEWISE_BIN_DIR, else the repository's bin/.
func Tool(name string) (string, error) {
	var dirs []string
	if d := os.Getenv("NODEWISE_BIN_DIR"); d != "" {
		dirs = append(dirs, d)
	}
	dirs = append(dirs, filepath.Join(testkit.RepoRoot(), "bin"))
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("no %s binary in %v: run `make chart-check` and `make tools` (hack/build-tool.sh) first", name, dirs)
}

// Template runs `helm template` on the chart with the CRDs and the given
// --set values, in Namespace, and decodes every object it renders.
func Template(ctx context.Context, set ...string) ([]*unstructured.Unstructured, error) {
	helm, err := Helm()
	if err != nil {
		return nil, err
	}
	args := []string{"template", "nodewise", ChartDir(), "--namespace", Namespace, "--include-crds", "--kube-version", KubeVersion}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, helm, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm template: %w: %s", err, errOut.String())
	}
	return Decode(&out)
}

// Kustomize builds deploy/ as `kubectl apply -k deploy/` would.
func Kustomize() ([]*unstructured.Unstructured, error) {
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(testkit.RepoRoot(), "deploy"))
	if err != nil {
		return nil, fmt.Errorf("kustomize build deploy/: %w", err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range res.Resources() {
		b, err := r.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("kustomize build deploy/: %s: %w", r.GetName(), err)
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(b); err != nil {
			return nil, fmt.Errorf("kustomize build deploy/: %s: %w", r.GetName(), err)
		}
		objs = append(objs, o)
	}
	return objs, nil
}

// Decode reads a multi-document YAML stream into objects, skipping empty documents.
func Decode(r io.Reader) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var objs []*unstructured.Unstructured
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("decoding rendered manifests: %w", err)
		}
		if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
			continue
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(raw); err != nil {
			return nil, fmt.Errorf("decoding rendered manifests: %w", err)
		}
		objs = append(objs, o)
	}
}

// isTestHook reports whether o is a `helm test` hook (helm.sh/hook lists
// "test"), which Helm creates only when the user runs `helm test`.
func isTestHook(o *unstructured.Unstructured) bool {
	for _, h := range strings.Split(o.GetAnnotations()["helm.sh/hook"], ",") {
		if strings.TrimSpace(h) == "test" {
			return true
		}
	}
	return false
}

// Key names an object: kind, namespace and name.
func Key(o *unstructured.Unstructured) string {
	return o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
}

// Apply server-side-applies the objects with field manager "nodewise-test":
// CRDs and Namespaces first, so the rest can be mapped and placed. It stops
// at the first object the API server refuses. As `helm install` does, it
// leaves out the `helm test` hooks (they run only under `helm test`): a
// test pod applied as a plain Pod would be a controller-less pod a drain
// refuses to evict.
func Apply(ctx context.Context, cfg *rest.Config, objs []*unstructured.Unstructured) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	var ordered []*unstructured.Unstructured
	for _, o := range objs {
		if !isTestHook(o) {
			ordered = append(ordered, o)
		}
	}
	first := func(o *unstructured.Unstructured) bool {
		return o.GetKind() == "CustomResourceDefinition" || o.GetKind() == "Namespace"
	}
	sort.SliceStable(ordered, func(i, j int) bool { return first(ordered[i]) && !first(ordered[j]) })
	force := true
	for i, o := range ordered {
		if i > 0 && first(ordered[i-1]) && !first(o) {
			mapper.Reset() // the CRDs just applied
		}
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			mapper.Reset()
			if m, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
				return fmt.Errorf("mapping %s: %w", Key(o), err)
			}
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		data, err := o.MarshalJSON()
		if err != nil {
			return err
		}
		if _, err := ri.Patch(ctx, o.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: "nodewise-test", Force: &force}); err != nil {
			return fmt.Errorf("server-side apply of %s: %w", Key(o), err)
		}
	}
	return nil
}

// EnsureNamespace creates namespace name unless it exists. The chart's surge
// Role lives in the Istio namespace, which Istio's install creates: a test
// that applies the chart before Istio makes it first.
func EnsureNamespace(ctx context.Context, kube kubernetes.Interface, name string) error {
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}
