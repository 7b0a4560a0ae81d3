package cluster

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// imagesDir is where `make images` writes the OCI archives: bin/images, found
// the way the tools are ($NODEWISE_BIN_DIR, which make sets, else the
// repository's bin/).
func imagesDir() string {
	if d := os.Getenv("NODEWISE_BIN_DIR"); d != "" {
		return filepath.Join(d, "images")
	}
	return filepath.Join("..", "..", "bin", "images")
}

// TestImagesRunVersion imports each image `make images` built into a
// containerd of its own and runs its binary's --version in a container
// (runc): the FROM scratch image holds a static binary that starts, and it is
// the one bin/ holds (the same version line).
func TestImagesRunVersion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := imagesDir()
	names := []string{"orchestrator", "nodeagent", "probe"}
	for _, name := range names {
		if _, err := os.Stat(filepath.Join(dir, name+".tar")); err != nil {
			t.Fatalf("no image archive %s: run `make images` (make test does): %v", filepath.Join(dir, name+".tar"), err)
		}
	}
	ctd, err := StartContainerd(ctx, t.TempDir(), ContainerdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- tail of the containerd log:\n%s", tail(ctd.proc.Log, 20))
		}
		ctd.Stop()
	})
	for _, name := range names {
		ref, err := ctd.Import(ctx, filepath.Join(dir, name+".tar"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(strings.Split(ref, ":")[0], "/"+name) {
			t.Errorf("%s.tar holds image %s, want one named …/%s", name, ref, name)
		}
		got, err := ctd.Run(ctx, ref, "version-"+name, "/"+name, "--version")
		if err != nil {
			t.Errorf("running %s --version in %s: %v", name, ref, err)
			continue
		}
		t.Logf("%s: %s", ref, strings.TrimSpace(got))
		want, err := exec.CommandContext(ctx, filepath.Join(filepath.Dir(dir), name), "--version").Output()
		if err != nil {
			t.Fatalf("bin/%s --version on the host: %v", name, err)
		}
		if strings.TrimSpace(got) != strings.TrimSpace(string(want)) || !strings.HasPrefix(got, name+" ") {
			t.Errorf("%s --version in its image printed %q; bin/%s prints %q", name, got, name, want)
		}
	}
}
