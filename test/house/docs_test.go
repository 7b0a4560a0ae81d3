package house

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The docs describe the system as it is; measurements and their history
// live in one log. These bars keep it so: a README a newcomer reads in one
// sitting, and no dated entry outside the bench log.
const (
	readmeMaxLines = 150
	benchLog       = "bench-log.md"
)

// datePattern is the acceptance grep: `grep -c '20[0-9][0-9]-[01][0-9]-[0-3][0-9]' docs/*.md`.
var datePattern = regexp.MustCompile(`20[0-9][0-9]-[01][0-9]-[0-3][0-9]`)

// repoRoot is the module root, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	return lines
}

// TestDocsDescribeTheSystemAsItIs fails when README.md exceeds 150 lines,
// when it does not link the bench log or name `make test` (what CI runs), or
// when any docs/*.md page other than the bench log carries a date (20YY-MM-DD):
// dated runs and history go to docs/bench-log.md, newest first.
func TestDocsDescribeTheSystemAsItIs(t *testing.T) {
	root := repoRoot(t)

	readme := readLines(t, filepath.Join(root, "README.md"))
	if n := len(readme); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move the detail to a docs/ page and link it", n, readmeMaxLines)
	}
	text := strings.Join(readme, "\n")
	if !strings.Contains(text, "docs/"+benchLog) {
		t.Errorf("README.md does not link docs/%s", benchLog)
	}
	if !regexp.MustCompile("(?m)^make test\\b").MatchString(text) {
		t.Errorf("README.md has no line starting `make test` (the command CI runs)")
	}

	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) == 0 {
		t.Fatal("no docs/*.md pages found")
	}
	sawLog := false
	for _, page := range pages {
		name := filepath.Base(page)
		if name == benchLog {
			sawLog = true
			continue
		}
		for i, line := range readLines(t, page) {
			if d := datePattern.FindString(line); d != "" {
				t.Errorf("docs/%s:%d carries the date %s: a page says how the system works now; move dated runs and history to docs/%s", name, i+1, d, benchLog)
			}
		}
	}
	if !sawLog {
		t.Errorf("docs/%s is missing", benchLog)
	}
}
