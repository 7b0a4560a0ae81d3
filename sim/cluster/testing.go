package cluster

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Start starts a cluster for a test and stops it when the test ends. When the
// test failed, the tail of every component's log is printed.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	// Thousands of nodes register through one API server: 50 ms more each.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute+time.Duration(opts.Nodes)*50*time.Millisecond)
	defer cancel()
	c, err := Up(ctx, filepath.Join(t.TempDir(), "sim"), opts)
	if err != nil {
		t.Fatalf("starting the simulated cluster: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range c.state.Processes {
				t.Logf("--- tail of %s log:\n%s", p.Name, tail(p.Log, 20))
			}
		}
		c.Stop()
	})
	return c
}

// InstallCRDs installs the CRDs in the YAML files at paths on c for a test
// (InstallCRD: created unless there, then waited for until served) and fails
// the test on the first that is not.
func InstallCRDs(t testing.TB, c *Cluster, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if err := InstallCRD(context.Background(), c.Config, p); err != nil {
			t.Fatal(err)
		}
	}
}

func tail(path string, lines int) []byte {
	data, err := os.ReadFile(path)
	if err != nil {
		return []byte(err.Error())
	}
	parts := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return bytes.Join(parts, []byte("\n"))
}
