package house

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// maxPackageLines bounds each package under orchestrator/: its non-test .go
// files together hold at most this many lines. A package that grows past it
// holds more than one concern; move one out to a room of its own.
const maxPackageLines = 1500

// maxMethods bounds the methods any one type under orchestrator/ declares:
// a type with more holds more than one concern; split it.
const maxMethods = 20

// packageLines counts the lines of the non-test .go files in dir (what
// `cat *.go | wc -l` counts, leaving out *_test.go).
func packageLines(dir string) (int, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return 0, err
		}
		n += bytes.Count(b, []byte("\n"))
	}
	return n, nil
}

// oversized returns one line per package over limit, naming it and its count.
func oversized(lines map[string]int, limit int) []string {
	var bad []string
	for p, n := range lines {
		if n > limit {
			bad = append(bad, fmt.Sprintf("%s: %d non-test lines, more than %d: move a concern out to a room of its own", p, n, limit))
		}
	}
	sort.Strings(bad)
	return bad
}

// methodCounts counts the methods each type declares in dir's non-test .go
// files, by receiver type name.
func methodCounts(dir string) (map[string]int, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	counts := map[string]int{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || len(fd.Recv.List) == 0 {
				continue
			}
			counts[receiverName(fd.Recv.List[0].Type)]++
		}
	}
	return counts, nil
}

// receiverName is a receiver's type name: T of T, *T, T[K] or *T[K].
func receiverName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return fmt.Sprintf("%T", e)
		}
	}
}

// tooMany returns one line per type (package.Type) over limit, naming it
// and its count.
func tooMany(counts map[string]int, limit int) []string {
	var bad []string
	for typ, n := range counts {
		if n > limit {
			bad = append(bad, fmt.Sprintf("%s: %d methods, more than %d: split it by concern", typ, n, limit))
		}
	}
	sort.Strings(bad)
	return bad
}

// orchestratorPackages maps each package under orchestrator/ (relative to
// the module) to its directory.
func orchestratorPackages(t *testing.T) map[string]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{.Dir}}", module+"/orchestrator/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dirs := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, dir, ok := strings.Cut(l, " ")
		if !ok {
			t.Fatalf("go list printed %q", l)
		}
		dirs[strings.TrimPrefix(path, module+"/")] = dir
	}
	return dirs
}

func TestOrchestratorTypesHaveAtMost20Methods(t *testing.T) {
	counts := map[string]int{}
	for pkg, dir := range orchestratorPackages(t) {
		c, err := methodCounts(dir)
		if err != nil {
			t.Fatal(err)
		}
		for typ, n := range c {
			counts[pkg+"."+typ] = n
		}
	}
	if counts["orchestrator.executor"] == 0 || len(counts) < 10 {
		t.Fatalf("counted %v: the check below would prove little", counts)
	}
	for _, v := range tooMany(counts, maxMethods) {
		t.Error(v)
	}
}

func TestOrchestratorPackagesStayUnder1500Lines(t *testing.T) {
	lines := map[string]int{}
	for pkg, dir := range orchestratorPackages(t) {
		n, err := packageLines(dir)
		if err != nil {
			t.Fatal(err)
		}
		lines[pkg] = n
	}
	if lines["orchestrator"] == 0 || len(lines) < 2 {
		t.Fatalf("counted %v: the check below would prove little", lines)
	}
	for _, v := range oversized(lines, maxPackageLines) {
		t.Error(v)
	}
}

func TestPackageSizeRuleCatches(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, n int) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(strings.Repeat("//\n", n)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.go", 1000)
	write("b.go", 501)
	write("a_test.go", 5000) // tests do not count
	n, err := packageLines(dir)
	if err != nil || n != 1501 {
		t.Fatalf("packageLines = %d, %v; want 1501", n, err)
	}
	bad := oversized(map[string]int{"orchestrator/big": n, "orchestrator/small": 1500}, maxPackageLines)
	if len(bad) != 1 || !strings.HasPrefix(bad[0], "orchestrator/big: 1501 non-test lines") {
		t.Fatalf("oversized = %q; want orchestrator/big named with its count", bad)
	}
}

func TestMethodRuleCatches(t *testing.T) {
	dir := t.TempDir()
	var src strings.Builder
	src.WriteString("package p\n\ntype big struct{}\ntype gen[K any] struct{}\n")
	for i := range 21 {
		fmt.Fprintf(&src, "func (b *big) m%d() {}\nfunc (g gen[K]) m%d() {}\n", i, i)
	}
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "p_test.go"), []byte("package p\n\nfunc (b *big) extra() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	counts, err := methodCounts(dir)
	if err != nil || counts["big"] != 21 || counts["gen"] != 21 {
		t.Fatalf("methodCounts = %v, %v; want big and gen with 21 each (tests do not count)", counts, err)
	}
	bad := tooMany(map[string]int{"o.big": 21, "o.ok": 20}, maxMethods)
	if len(bad) != 1 || !strings.HasPrefix(bad[0], "o.big: 21 methods") {
		t.Fatalf("tooMany = %q; want o.big named with its count", bad)
	}
}
