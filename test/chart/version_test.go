package chart

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nodewise/nodewise/test/testkit"
)

// TestVersionIsTheChartsAppVersion: the chart's appVersion is nodewise's one
// version source. The binaries make builds report it (their --version and
// what `make -n build` links in), make images tags the images with it, and
// the kustomize base runs images of that tag.
func TestVersionIsTheChartsAppVersion(t *testing.T) {
	meta, err := os.ReadFile(filepath.Join(ChartDir(), "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^appVersion: *(\S+)$`).FindSubmatch(meta)
	if m == nil {
		t.Fatal("Chart.yaml has no appVersion")
	}
	app := string(m[1])

	// What make would build and tag, with no VERSION given.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "VERSION=") && !strings.HasPrefix(kv, "IMAGE_TAG=") {
			env = append(env, kv)
		}
	}
	plan := func(target string) string {
		cmd := exec.Command("make", "-n", "--no-print-directory", target)
		cmd.Dir = testkit.RepoRoot()
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make -n %s: %v: %s", target, err, out)
		}
		return string(out)
	}
	if got := regexp.MustCompile(`buildinfo\.version=(\S*?)'`).FindStringSubmatch(plan("build")); got == nil || got[1] != app {
		t.Errorf("make build links in buildinfo.version %v, want the chart's appVersion %s", got, app)
	}
	if got := regexp.MustCompile(`hack/images\.sh (\S+) (\S+) `).FindStringSubmatch(plan("images")); got == nil || got[1] != app || got[2] != app {
		t.Errorf("make images runs images.sh with version and tag %v, want the chart's appVersion %s", got, app)
	}

	// The binaries make build wrote (make test builds them first).
	for _, name := range []string{"nodewise", "orchestrator", "nodeagent", "probe"} {
		bin, err := Tool(name)
		if err != nil {
			testkit.Unavailable(t, "%v (make build writes it)", err)
		}
		// nodewise version --client: "Client: nodewise vX.Y.Z (goN)";
		// the others' --version: "NAME vX.Y.Z".
		args := []string{"--version"}
		if name == "nodewise" {
			args = []string{"version", "--client"}
		}
		out, err := exec.Command(bin, args...).Output()
		if err != nil {
			t.Fatalf("%s %s: %v", bin, strings.Join(args, " "), err)
		}
		f := strings.Fields(strings.TrimPrefix(string(out), "Client: "))
		if len(f) < 2 || f[0] != name || f[1] != app {
			t.Errorf("%s %s printed %q, want %s %s (the chart's appVersion)", bin, strings.Join(args, " "), out, name, app)
		}
	}

	// The kustomize base's images.
	images := regexp.MustCompile(`(?m)^\s*image: *(ghcr\.io/nodewise/\S+)$`)
	for _, f := range []string{"orchestrator/deployment.yaml", "sidecar/deployment.yaml", "nodeagent/daemonset.yaml", "probe/probe.yaml"} {
		b, err := os.ReadFile(filepath.Join(testkit.RepoRoot(), "deploy", f))
		if err != nil {
			t.Fatal(err)
		}
		refs := images.FindAllSubmatch(b, -1)
		if len(refs) == 0 {
			t.Errorf("deploy/%s names no ghcr.io/nodewise image", f)
		}
		for _, r := range refs {
			if !strings.HasSuffix(string(r[1]), ":"+app) {
				t.Errorf("deploy/%s runs %s, want the tag %s (the chart's appVersion)", f, r[1], app)
			}
		}
	}
}
