package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
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
// the link is new. The file lives in a temporary directory of its own for
// the test process's life.
func Binary(tb testing.TB, cmd string) string {
	tb.Helper()
	v, _ := binaries.LoadOrStore(cmd, &builtBinary{})
	b := v.(*builtBinary)
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "nodewise-test-"+cmd+"-")
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
