// Package testkit holds the small helpers the test suites share: the
// repository's root and its CRD files, polling for a condition, a free port.
//
// It is for tests only: test/ suites and the _test.go files of other packages
// import it; product code never does (test/house checks). It depends on
// nothing of ours, so a product package's unit tests may use it without
// pulling in the simulated cluster.
package testkit

import (
	"net"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// RepoRoot is the repository's root directory (found from this source file,
// so it holds wherever `go test` runs).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// CRDDir is deploy/crds, where the generated CRDs are.
func CRDDir() string { return filepath.Join(RepoRoot(), "deploy", "crds") }

// The CRD files in CRDDir.
const (
	NodeRolloutsCRD       = "nodewise.io_noderollouts.yaml"
	RevisionMigrationsCRD = "nodewise.io_revisionmigrations.yaml"
	PodAgePoliciesCRD     = "nodewise.io_podagepolicies.yaml"
)

// CRD is the path of the CRD file name in CRDDir (NodeRolloutsCRD,
// RevisionMigrationsCRD).
func CRD(name string) string { return filepath.Join(CRDDir(), name) }

// PollInterval is how often WaitFor checks its condition.
const PollInterval = 100 * time.Millisecond

// WaitFor checks cond at once and then every PollInterval until it holds,
// and fails t if timeout passes first. cond's error says why the condition
// does not hold yet: it does not stop the wait, it is ignored once cond
// holds, and the last one is in the failure message. cond may itself fail t
// (it runs on t's goroutine).
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if ok {
			return
		}
		if !time.Now().Before(deadline) {
			if err != nil {
				t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
			}
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(PollInterval)
	}
}

// FreePort is a TCP port free on ip now, so that listeners of tests running
// at the same time (simulated nodes share addresses) do not collide.
func FreePort(t testing.TB, ip string) int {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
