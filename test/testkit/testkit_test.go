package testkit

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestRepoRootHoldsTheModuleAndTheCRDs(t *testing.T) {
	if _, err := os.Stat(filepath.Join(RepoRoot(), "go.mod")); err != nil {
		t.Fatalf("RepoRoot %s: %v", RepoRoot(), err)
	}
	for _, name := range []string{NodeRolloutsCRD, RevisionMigrationsCRD} {
		if _, err := os.Stat(CRD(name)); err != nil {
			t.Errorf("CRD %s: %v", name, err)
		}
	}
}

// fatalT records a Fatalf and stops its goroutine, as testing.T does.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Helper() {}
func (f *fatalT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// waitFor runs WaitFor on a fatalT and returns its failure ("" if none).
func waitFor(timeout time.Duration, cond func() (bool, error)) string {
	f := &fatalT{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		WaitFor(f, timeout, "the thing", cond)
	}()
	<-done
	return f.msg
}

func TestWaitFor(t *testing.T) {
	n := 0
	if msg := waitFor(time.Minute, func() (bool, error) { n++; return n == 3, errors.New("not yet") }); msg != "" || n != 3 {
		t.Errorf("a condition that holds on the 3rd check: %d checks, failure %q", n, msg)
	}
	n = 0
	msg := waitFor(300*time.Millisecond, func() (bool, error) { n++; return false, fmt.Errorf("check %d", n) })
	if !strings.Contains(msg, "waiting for the thing") || !strings.HasSuffix(msg, fmt.Sprintf(": check %d", n)) {
		t.Errorf("a condition that never holds: failure %q after %d checks, want the last reason", msg, n)
	}
	if msg := waitFor(0, func() (bool, error) { return false, nil }); !strings.HasSuffix(msg, "waiting for the thing") {
		t.Errorf("no reason: failure %q", msg)
	}
}

func TestFreePort(t *testing.T) {
	p := FreePort(t, "127.0.0.1")
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
	if err != nil {
		t.Fatalf("port %d is not free: %v", p, err)
	}
	l.Close()
}
