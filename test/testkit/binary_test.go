package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestSweepBinariesRemovesOnlyEndedProcesses: the binaries of ended test
// processes go; a running one's, and a recent one without a pid, stay.
func TestSweepBinariesRemovesOnlyEndedProcesses(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	ended := exec.Command("true")
	if err := ended.Run(); err != nil {
		t.Fatal(err)
	}
	dirs := map[string]bool{ // name → kept
		fmt.Sprintf("nodewise-test-nodewise-%d-1", ended.Process.Pid):     false,
		fmt.Sprintf("nodewise-test-nodewise-%d-2", os.Getpid()):           true,
		"nodewise-test-nodewise-123456":                                   true,
		"nodewise-test-nodewise-654321":                                   false,
		fmt.Sprintf("nodewise-test-orchestrator-%d-3", ended.Process.Pid): true, // another command's
	}
	for name := range dirs {
		if err := os.Mkdir(filepath.Join(tmp, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-48 * time.Hour)
	if err := os.Chtimes(filepath.Join(tmp, "nodewise-test-nodewise-654321"), old, old); err != nil {
		t.Fatal(err)
	}
	sweepBinaries("nodewise")
	for name, kept := range dirs {
		_, err := os.Stat(filepath.Join(tmp, name))
		if got := err == nil; got != kept {
			t.Errorf("%s: kept %v, want %v", name, got, kept)
		}
	}
}
