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

// TestImagesThroughRegistry pushes the images and the chart (helm push, an
// OCI artifact) to a registry on loopback, then pulls each image by its
// ghcr.io name, the chart's default, through containerd's hosts.toml mirror
// and runs it: the path a cluster behind a private mirror takes.
func TestImagesThroughRegistry(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := imagesDir()
	bin := filepath.Dir(dir)
	reg := startRegistry(t, ctx, bin)
	ctd, err := StartContainerd(ctx, t.TempDir(), ContainerdOptions{RegistryMirrors: map[string]string{"ghcr.io": "http://" + reg.Host}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ctd.Stop)
	names := []string{"orchestrator", "nodeagent", "probe"}
	refs := pushImages(t, ctx, ctd, reg, dir, names...)
	for _, name := range names {
		ref := refs[name]
		if err := ctd.Pull(ctx, ref); err != nil {
			t.Fatalf("pulling %s through the mirror %s: %v", ref, reg.Host, err)
		}
		if out, err := ctd.Run(ctx, ref, "mirror-"+name, "/"+name, "--version"); err != nil || !strings.HasPrefix(out, name+" ") {
			t.Errorf("%s pulled through the mirror: --version printed %q, %v", ref, out, err)
		}
		checkPulledThroughMirror(t, reg, ref)
	}

	// The chart, as an OCI artifact: helm push, then read back from the registry.
	helm := filepath.Join(bin, "helm")
	home := t.TempDir()
	env := append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	runHelm := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, helm, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helm %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	chartDir := filepath.Join("..", "..", "deploy", "charts", "nodewise")
	runHelm("package", chartDir, "-d", home)
	pkgs, _ := filepath.Glob(filepath.Join(home, "nodewise-*.tgz"))
	if len(pkgs) != 1 {
		t.Fatalf("helm package wrote %v, want one nodewise-VERSION.tgz", pkgs)
	}
	runHelm("push", pkgs[0], "oci://"+reg.Host+"/charts", "--plain-http")
	version := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(pkgs[0]), "nodewise-"), ".tgz")
	if got := runHelm("show", "chart", "oci://"+reg.Host+"/charts/nodewise", "--version", version, "--plain-http"); !strings.Contains(got, "name: nodewise") {
		t.Errorf("helm show chart from the registry printed %q, want the nodewise chart", got)
	}
}

// startRegistry starts bin/registry on loopback for the test, stopped when
// it ends (with the tail of its log when it failed).
func startRegistry(t *testing.T, ctx context.Context, bin string) *Registry {
	t.Helper()
	reg, err := StartRegistry(ctx, filepath.Join(bin, "registry"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- tail of the registry log:\n%s", tail(reg.Log(), 20))
		}
		reg.Stop()
	})
	return reg
}

// pushImages puts the images `make images` built (dir/NAME.tar) into reg
// under their own ghcr.io repository and tag, as a release pushes them: each
// is imported into ctd, pushed, and removed from ctd again, so nothing of it
// is left there and whatever runs it next pulls it all from reg through the
// ghcr.io mirror. It returns each image's ghcr.io reference.
func pushImages(t *testing.T, ctx context.Context, ctd *Containerd, reg *Registry, dir string, names ...string) map[string]string {
	t.Helper()
	refs := map[string]string{}
	for _, name := range names {
		ref, err := ctd.Import(ctx, filepath.Join(dir, name+".tar"))
		if err != nil {
			t.Fatalf("%v (run `make images`)", err)
		}
		repoTag := strings.TrimPrefix(ref, "ghcr.io/")
		if repoTag == ref {
			t.Fatalf("%s.tar holds %s, want an image of ghcr.io (the chart's default)", name, ref)
		}
		pushed := reg.Host + "/" + repoTag
		if err := ctd.Push(ctx, ref, pushed); err != nil {
			t.Fatal(err)
		}
		if err := ctd.Remove(ctx, ref, pushed); err != nil {
			t.Fatal(err)
		}
		refs[name] = ref
	}
	return refs
}

// checkPulledThroughMirror fails the test unless reg's access log shows the
// blobs of ref fetched through a mirror of ghcr.io: containerd names the
// upstream host in ?ns= when it pulls through a mirror.
func checkPulledThroughMirror(t *testing.T, reg *Registry, ref string) {
	t.Helper()
	repoTag := strings.TrimPrefix(ref, "ghcr.io/")
	blobs := `"GET /v2/` + strings.Split(repoTag, ":")[0] + "/blobs/sha256:"
	if !logHas(t, reg.Log(), blobs, "?ns=ghcr.io ") {
		t.Errorf("the registry's access log has no %s…?ns=ghcr.io: %s was not pulled from it through the mirror", blobs, ref)
	}
}

// logHas reports whether a line of the log at path holds every one of parts.
func logHas(t *testing.T, path string, parts ...string) bool {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}
