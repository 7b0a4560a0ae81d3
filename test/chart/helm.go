package chart

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
// package's path.
func Package(ctx context.Context, dir, out string) (string, error) {
	got, err := HelmRun(ctx, "", "package", dir, "--destination", out)
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
	archive := exec.CommandContext(ctx, "git", "-C", RepoRoot(), "archive", "--format=tar", PreviousChartCommit, "deploy/charts/nodewise")
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return "", err
	}
	untar.Stdin = pipe
	var errs bytes.Buffer
	archive.Stderr, untar.Stderr = &errs, &errs
	if err := untar.Start(); err != nil {
		return "", err
	}
	if err := archive.Run(); err != nil {
		return "", fmt.Errorf("git archive %s (the upgrade test needs the repository's history): %w: %s", PreviousChartCommit, err, errs.String())
	}
	if err := untar.Wait(); err != nil {
		return "", fmt.Errorf("extracting the previous chart: %w: %s", err, errs.String())
	}
	return filepath.Join(dir, "deploy", "charts", "nodewise"), nil
}
