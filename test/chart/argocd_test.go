package chart

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"text/template/parse"
)

// TestChartRendersWithoutTheCluster: no template calls `lookup`. Argo CD
// (and Flux's helm-controller with --dry-run, and any `helm template`
// pipeline) renders without a cluster, where lookup returns nothing, so a
// lookup makes the chart install one thing under Helm and another under
// Argo CD. The walk parses every template as Helm does (text/template), so
// a lookup inside any action, pipeline or branch is found.
func TestChartRendersWithoutTheCluster(t *testing.T) {
	var files []string
	err := filepath.WalkDir(filepath.Join(ChartDir(), "templates"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".tpl") || strings.HasSuffix(p, ".txt")) {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 10 {
		t.Fatalf("found only %d templates under %s", len(files), ChartDir())
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		tr := parse.New(f)
		tr.Mode = parse.SkipFuncCheck | parse.ParseComments
		trees := map[string]*parse.Tree{}
		if _, err := tr.Parse(string(b), "{{", "}}", trees); err != nil {
			t.Fatalf("parsing %s: %v", f, err)
		}
		for name, tree := range trees {
			if calls(tree.Root, "lookup") {
				t.Errorf("%s (template %s) calls lookup: under `helm template` (Argo CD) it returns nothing and the chart renders otherwise than under helm install", f, name)
			}
		}
	}
}

// calls reports whether the function fn is called anywhere under n.
func calls(n parse.Node, fn string) bool {
	switch n := n.(type) {
	case nil:
		return false
	case *parse.ListNode:
		if n == nil {
			return false
		}
		for _, c := range n.Nodes {
			if calls(c, fn) {
				return true
			}
		}
	case *parse.ActionNode:
		return calls(n.Pipe, fn)
	case *parse.PipeNode:
		if n == nil {
			return false
		}
		for _, c := range n.Cmds {
			if calls(c, fn) {
				return true
			}
		}
	case *parse.CommandNode:
		for _, a := range n.Args {
			if calls(a, fn) {
				return true
			}
		}
	case *parse.IdentifierNode:
		return n.Ident == fn
	case *parse.IfNode:
		return calls(n.Pipe, fn) || calls(n.List, fn) || calls(n.ElseList, fn)
	case *parse.RangeNode:
		return calls(n.Pipe, fn) || calls(n.List, fn) || calls(n.ElseList, fn)
	case *parse.WithNode:
		return calls(n.Pipe, fn) || calls(n.List, fn) || calls(n.ElseList, fn)
	case *parse.TemplateNode:
		return calls(n.Pipe, fn)
	}
	return false
}

// TestChartArgoCDPostSyncCheck: Argo CD skips `helm test` hooks, so
// helmTest.argocdPostSync makes the agents' check an Argo CD PostSync hook,
// recreated on each sync, while Helm still sees a test hook; off by
// default, the pod carries no Argo CD annotation. With createIstioNamespace
// the Istio namespace renders (no lookup decides it) and is kept, which
// Argo CD honours as Delete=false.
func TestChartArgoCDPostSyncCheck(t *testing.T) {
	const pod = "Pod " + Namespace + "/nodewise-test-agents"
	for _, k := range []string{"argocd.argoproj.io/hook", "argocd.argoproj.io/hook-delete-policy"} {
		if v, ok := render(t)[pod].GetAnnotations()[k]; ok {
			t.Errorf("by default the test pod carries %s=%s", k, v)
		}
	}
	objs := render(t, "helmTest.argocdPostSync=true", "createIstioNamespace=true")
	ann := objs[pod].GetAnnotations()
	for k, want := range map[string]string{
		"argocd.argoproj.io/hook":               "PostSync",
		"argocd.argoproj.io/hook-delete-policy": "BeforeHookCreation",
		"helm.sh/hook":                          "test",
	} {
		if ann[k] != want {
			t.Errorf("helmTest.argocdPostSync=true: test pod %s=%q, want %q", k, ann[k], want)
		}
	}
	ns := objs["Namespace /istio-system"]
	if ns == nil {
		t.Fatal("createIstioNamespace=true renders no Istio namespace under helm template")
	}
	if ns.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
		t.Errorf("the Istio namespace is not kept: %v", ns.GetAnnotations())
	}
}
