package house

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// keyPattern is a label, annotation or finalizer key in nodewise's domain,
// as a Go string literal spells it (sim.nodewise.io/… included).
var keyPattern = regexp.MustCompile(`"((?:[a-z]+\.)?nodewise\.io/[a-z0-9][a-z0-9.-]*)`)

// notKeys are names in nodewise's domain that are no label or annotation:
// the agents' certificate signer (docs/runbook.md names it).
var notKeys = map[string]bool{"nodewise.io/agent-serving": true}

// TestReadmeTablesEveryKey fails when a key nodewise writes or reads (a
// nodewise.io string literal in its non-test Go) is missing from the
// README's table of labels and annotations: in full, or, on a row that
// abbreviates a family, as its last part in backticks (`resumed-by`).
func TestReadmeTablesEveryKey(t *testing.T) {
	root := repoRoot(t)
	var table []string
	for _, l := range readLines(t, filepath.Join(root, "README.md")) {
		if strings.HasPrefix(l, "| `") && strings.Contains(l, "nodewise.io/") {
			table = append(table, l)
		}
	}
	if len(table) == 0 {
		t.Fatal("README.md has no table of nodewise.io keys")
	}
	keys := map[string]string{} // key → a file that names it
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") || rel == "bin" || d.Name() == "testdata" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range keyPattern.FindAllStringSubmatch(string(src), -1) {
			// A literal ending in - is a prefix (recreated-<daemonset>):
			// the table names it with its placeholder.
			if k := strings.TrimRight(m[1], "."); !strings.HasSuffix(k, "/") && !notKeys[k] {
				keys[k] = rel
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) < 20 {
		t.Fatalf("found %d nodewise.io keys in the Go sources, expected dozens: is the pattern still right?", len(keys))
	}
	for k, file := range keys {
		_, last, _ := strings.Cut(k, "/")
		found := false
		for _, row := range table {
			prefix := strings.HasSuffix(k, "-") && strings.Contains(row, "`"+k)
			if prefix || strings.Contains(row, "`"+k+"`") || strings.Contains(row, "`"+last+"`") {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("%s (in %s) is not in README.md's table of labels and annotations", k, file)
		}
	}
}
