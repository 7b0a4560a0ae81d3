package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var binaries sync.Map // command dir (./cmd/NAME) → *builtBinary

type builtBinary struct {
	once sync.Once
	path string
	err  error
}

// Binary builds one of nodewise's commands (cmd, e.g. "nodewise" or
// "orchestrator") once per test binary and returns its path, built as
// `make build` builds (-trimpath, CGO_ENABLED=0), so every package comes
// from the build cache make build (and make test's images) filled and only
// the link is new. The file lives in a temporary directory of its own,
// named for the test process; the next build removes those of processes
// that have ended, so test runs do not leave a binary each behind.
func Binary(tb testing.TB, cmd string) string {
	tb.Helper()
	v, _ := binaries.LoadOrStore(cmd, &builtBinary{})
	b := v.(*builtBinary)
	b.once.Do(func() {
		sweepBinaries(cmd)
		dir, err := os.MkdirTemp("", fmt.Sprintf("nodewise-test-%s-%d-", cmd, os.Getpid()))
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, cmd)
		build := exec.Command("go", "build", "-trimpath", "-o", b.path, "./cmd/"+cmd)
		build.Dir = RepoRoot()
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build ./cmd/%s: %v\n%s", cmd, err, out)
		}
	})
	if b.err != nil {
		tb.Fatal(b.err)
	}
	return b.path
}

// sweepBinaries removes the directories Binary made for cmd in test
// processes that have ended: the pid is in the name (a name without one,
// from an older build of this helper, goes once a day old).
func sweepBinaries(cmd string) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "nodewise-test-"+cmd+"-*"))
	for _, dir := range dirs {
		rest := strings.TrimPrefix(filepath.Base(dir), "nodewise-test-"+cmd+"-")
		pid, _, withPid := strings.Cut(rest, "-")
		if n, err := strconv.Atoi(pid); withPid && err == nil {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", n)); err == nil {
				continue // that test process still runs
			}
		} else if fi, err := os.Stat(dir); err != nil || time.Since(fi.ModTime()) < 24*time.Hour {
			continue
		}
		_ = os.RemoveAll(dir)
	}
}
