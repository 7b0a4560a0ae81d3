package chart

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/nodewise/nodewise/test/testkit"
)

// PreviousChartCommit is main's last commit with chart 0.1.0 (CRDs in
// crds/, which Helm never upgrades): the upgrade test installs its package.
const PreviousChartCommit = "8623bda2e7dbd9c6c63dda7e3d9de6292e661853"

// HelmRun runs helm against the cluster of kubeconfig (empty: none) and
// returns its combined output.
func HelmRun(ctx context.Context, kubeconfig string, args ...string) (string, error) {
	helm, err := Helm()
	if err != nil {
		return "", err
	}
	if kubeconfig != "" {
		args = append(args, "--kubeconfig", kubeconfig)
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, helm, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	// Helm's own state (repositories, cache) stays out of the user's home.
	tmp := os.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(tmp, "nodewise-helm-cache"), "HELM_CONFIG_HOME="+filepath.Join(tmp, "nodewise-helm-config"), "HELM_DATA_HOME="+filepath.Join(tmp, "nodewise-helm-data"))
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// Package runs `helm package` on the chart in dir into out and returns the
// package's path. The simulated cluster's API server, built from its module,
// reports Kubernetes v0.0.0-master, which no kubeVersion constraint admits
// (and helm install has no --kube-version), so the package is made from a
// copy without Chart.yaml's kubeVersion line; nothing else differs.
func Package(ctx context.Context, dir, out string) (string, error) {
	cp := filepath.Join(out, "src-"+filepath.Base(filepath.Dir(filepath.Dir(dir))))
	if err := os.MkdirAll(cp, 0o755); err != nil {
		return "", err
	}
	if b, err := exec.CommandContext(ctx, "cp", "-r", dir, cp).CombinedOutput(); err != nil {
		return "", fmt.Errorf("copying the chart: %w: %s", err, b)
	}
	chart := filepath.Join(cp, filepath.Base(dir))
	meta, err := os.ReadFile(filepath.Join(chart, "Chart.yaml"))
	if err != nil {
		return "", err
	}
	var keep []string
	for _, l := range strings.Split(string(meta), "\n") {
		if !strings.HasPrefix(l, "kubeVersion:") {
			keep = append(keep, l)
		}
	}
	if err := os.WriteFile(filepath.Join(chart, "Chart.yaml"), []byte(strings.Join(keep, "\n")), 0o600); err != nil {
		return "", err
	}
	got, err := HelmRun(ctx, "", "package", chart, "--destination", out)
	if err != nil {
		return "", err
	}
	// "Successfully packaged chart and saved it to: /path/nodewise-0.2.0.tgz"
	_, path, ok := strings.Cut(strings.TrimSpace(got), "saved it to: ")
	if !ok {
		return "", fmt.Errorf("helm package: no package path in %q", got)
	}
	return path, nil
}

// PreviousChart extracts the chart of PreviousChartCommit from the
// repository's history into dir and returns the chart's directory.
func PreviousChart(ctx context.Context, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tarball := filepath.Join(dir, "previous.tar")
	if b, err := exec.CommandContext(ctx, "git", "-C", testkit.RepoRoot(), "archive", "--format=tar", "-o", tarball, PreviousChartCommit, "deploy/charts/nodewise").CombinedOutput(); err != nil {
		return "", fmt.Errorf("git archive %s (the upgrade test needs the repository's history): %w: %s", PreviousChartCommit, err, b)
	}
	if b, err := exec.CommandContext(ctx, "tar", "-x", "-f", tarball, "-C", dir).CombinedOutput(); err != nil {
		return "", fmt.Errorf("extracting the previous chart: %w: %s", err, b)
	}
	return filepath.Join(dir, "deploy", "charts", "nodewise"), nil
}
