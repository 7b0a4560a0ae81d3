// Package gitops reads nodewise's objects as the GitOps tools do, for the
// suites: Argo CD's health (the Lua checks of deploy/argocd, run the way
// Argo CD runs them) and kstatus's status (what Flux waits on), both from an
// object as the API server serves it (unstructured, through the dynamic
// client).
package gitops

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"

	"github.com/nodewise/nodewise/deploy/argocd"
)

// Health is what an Argo CD health check returned.
type Health struct {
	Status, Message string
}

// argoStatuses are the health statuses Argo CD accepts from a script; it
// shows any other as Unknown.
var argoStatuses = map[string]bool{"Healthy": true, "Progressing": true, "Degraded": true, "Suspended": true, "Missing": true, "Unknown": true}

// ArgoHealth runs the Lua health check script on obj as Argo CD does: in
// gopher-lua with only the package, base and table libraries open (no
// string, no os), obj as the global `obj` (JSON numbers as Lua numbers), a
// one-second limit, and the table the script returns read as the health.
func ArgoHealth(script string, obj map[string]any) (Health, error) {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.LoadLibName, lua.OpenPackage}, {lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(lib.open), Protect: true}, lua.LString(lib.name)); err != nil {
			return Health{}, fmt.Errorf("opening Lua library %q: %w", lib.name, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", luaValue(l, obj))
	if err := l.DoString(script); err != nil {
		return Health{}, fmt.Errorf("running the health check: %w", err)
	}
	tbl, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		return Health{}, fmt.Errorf("the health check returned a %s, not a table", l.Get(-1).Type())
	}
	h := Health{Status: lua.LVAsString(tbl.RawGetString("status")), Message: lua.LVAsString(tbl.RawGetString("message"))}
	if !argoStatuses[h.Status] {
		return h, fmt.Errorf("the health check returned status %q, which Argo CD shows as Unknown", h.Status)
	}
	return h, nil
}

// luaValue is v (decoded JSON, as in an unstructured object) as a Lua value.
func luaValue(l *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case bool:
		return lua.LBool(v)
	case string:
		return lua.LString(v)
	case int64:
		return lua.LNumber(v)
	case int:
		return lua.LNumber(v)
	case float64:
		return lua.LNumber(v)
	case json.Number:
		return lua.LString(v) // as Argo CD passes it
	case []any:
		t := l.CreateTable(len(v), 0)
		for _, e := range v {
			t.Append(luaValue(l, e))
		}
		return t
	case map[string]any:
		t := l.CreateTable(0, len(v))
		for k, e := range v {
			t.RawSetString(k, luaValue(l, e))
		}
		return t
	}
	return lua.LNil
}

// Kstatus is kstatus's reading of obj (status.Compute): Current,
// InProgress, Failed or Terminating, and its message.
func Kstatus(obj map[string]any) (status.Status, string, error) {
	res, err := status.Compute(&unstructured.Unstructured{Object: obj})
	if err != nil {
		return "", "", err
	}
	return res.Status, res.Message, nil
}

// ArgoNamespace and ArgoConfigMap are where Argo CD reads its settings.
const (
	ArgoNamespace = "argocd"
	ArgoConfigMap = "argocd-cm"
)

// InstallArgoHealth installs the health checks the way docs/gitops.md says:
// deploy/argocd/argocd-cm.yaml as a patch of Argo CD's argocd-cm (created
// first, with a setting of its own, as Argo CD's install leaves it), and
// returns the scripts as Argo CD then reads them, by kind, from the patched
// ConfigMap on the API server.
func InstallArgoHealth(ctx context.Context, kube kubernetes.Interface) (map[string]string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ArgoNamespace}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating namespace %s: %w", ArgoNamespace, err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: ArgoConfigMap, Namespace: ArgoNamespace}, Data: map[string]string{"timeout.reconciliation": "180s"}}
	if _, err := kube.CoreV1().ConfigMaps(ArgoNamespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating %s/%s: %w", ArgoNamespace, ArgoConfigMap, err)
	}
	patch, err := yaml.YAMLToJSON(argocd.ConfigMapPatch())
	if err != nil {
		return nil, fmt.Errorf("reading argocd-cm.yaml: %w", err)
	}
	got, err := kube.CoreV1().ConfigMaps(ArgoNamespace).Patch(ctx, ArgoConfigMap, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return nil, fmt.Errorf("patching %s/%s with argocd-cm.yaml: %w", ArgoNamespace, ArgoConfigMap, err)
	}
	if got.Data["timeout.reconciliation"] == "" {
		return nil, fmt.Errorf("patching %s/%s dropped its other settings: %v", ArgoNamespace, ArgoConfigMap, got.Data)
	}
	scripts := map[string]string{}
	for _, kind := range argocd.Kinds {
		s, ok := got.Data[argocd.ConfigMapKey(kind)]
		if !ok {
			return nil, fmt.Errorf("%s/%s has no %s after the patch", ArgoNamespace, ArgoConfigMap, argocd.ConfigMapKey(kind))
		}
		scripts[kind] = s
	}
	return scripts, nil
}

// Reading is how both tools read one object.
type Reading struct {
	// Object is the object as the API server served it.
	Object *unstructured.Unstructured
	// Argo is Argo CD's health of it.
	Argo Health
	// Kstatus and KstatusMessage are kstatus's status of it.
	Kstatus        status.Status
	KstatusMessage string
}

// Reader reads nodewise's objects from the API server and how Argo CD (with
// the scripts InstallArgoHealth returned) and kstatus see them.
type Reader struct {
	dyn     dynamic.Interface
	scripts map[string]string
}

// NewReader is a Reader for the API server of cfg.
func NewReader(cfg *rest.Config, scripts map[string]string) (*Reader, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Reader{dyn: dyn, scripts: scripts}, nil
}

// resources are the cluster-scoped resources of nodewise's kinds.
var resources = map[string]string{"NodeRollout": "noderollouts", "RevisionMigration": "revisionmigrations"}

// Read gets the object of kind named name and reads it as both tools do.
func (r *Reader) Read(ctx context.Context, kind, name string) (Reading, error) {
	gvr := schema.GroupVersionResource{Group: argocd.Group, Version: "v1alpha1", Resource: resources[kind]}
	u, err := r.dyn.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return Reading{}, fmt.Errorf("reading %s %s: %w", kind, name, err)
	}
	rd := Reading{Object: u}
	if rd.Argo, err = ArgoHealth(r.scripts[kind], u.Object); err != nil {
		return rd, fmt.Errorf("the Argo CD health of %s %s: %w", kind, name, err)
	}
	if rd.Kstatus, rd.KstatusMessage, err = Kstatus(u.Object); err != nil {
		return rd, fmt.Errorf("kstatus of %s %s: %w", kind, name, err)
	}
	return rd, nil
}

// Checker reads the objects of one kind for a test and fails it when a
// reading is not the one expected.
type Checker struct {
	t    testing.TB
	ctx  context.Context
	r    *Reader
	kind string
}

// NewChecker installs the health checks on the API server of cfg
// (InstallArgoHealth) and checks objects of kind served by it.
func NewChecker(t testing.TB, ctx context.Context, kube kubernetes.Interface, cfg *rest.Config, kind string) *Checker {
	t.Helper()
	scripts, err := InstallArgoHealth(ctx, kube)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(cfg, scripts)
	if err != nil {
		t.Fatal(err)
	}
	return &Checker{t: t, ctx: ctx, r: r, kind: kind}
}

// Expect reads the object named name and fails the test (going on) unless
// Argo CD reads it as argo and kstatus as flux.
func (c *Checker) Expect(name, argo string, flux status.Status) Reading {
	c.t.Helper()
	rd, err := c.r.Read(c.ctx, c.kind, name)
	if err != nil {
		c.t.Fatal(err)
	}
	if rd.Argo.Status != argo || rd.Kstatus != flux {
		st, _, _ := unstructured.NestedMap(rd.Object.Object, "status")
		c.t.Errorf("%s %s (generation %d, status %v): Argo CD %s %q, kstatus %s %q; want %s, %s",
			c.kind, name, rd.Object.GetGeneration(), st, rd.Argo.Status, rd.Argo.Message, rd.Kstatus, rd.KstatusMessage, argo, flux)
	}
	return rd
}
