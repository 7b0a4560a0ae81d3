package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Containerd is a containerd (Debian's, 1.6) of the test's own: its root,
// state, socket and configuration live in one directory, so it shares nothing
// with a containerd the host may run. Its runtime is runc, with the cgroupfs
// driver (no systemd here). It runs nodewise's images (ctr run) and, with CRI
// on, the pods of a real kubelet node.
type Containerd struct {
	// Dir holds everything; Socket is its gRPC address.
	Dir, Socket string
	// Namespace is the containerd namespace ctr uses: k8s.io, the kubelet's.
	Namespace string

	proc *process
}

// ContainerdOptions configure StartContainerd.
type ContainerdOptions struct {
	// CRI turns on the CRI plugin for a kubelet: pods get their network from
	// the CNI configuration in Dir/cni (Debian's plugins in /usr/lib/cni).
	CRI bool
	// SandboxImage is the pause image of the CRI's pod sandboxes; it must be
	// imported before the first pod (see Import). Required with CRI.
	SandboxImage string
	// RegistryMirrors maps a registry host (ghcr.io) to the URL of the
	// registry that serves it (http://127.0.0.1:5000): the CRI pulls through
	// a hosts.toml per host under Dir/certs.d.
	RegistryMirrors map[string]string
	// CNIBinDir is where the CRI finds its CNI plugins; empty means
	// Debian's /usr/lib/cni.
	CNIBinDir string
}

// cniBinDir is where Debian's containernetworking-plugins installs bridge,
// host-local and loopback.
const cniBinDir = "/usr/lib/cni"

// StartContainerd starts a containerd in dir and waits until it answers.
func StartContainerd(ctx context.Context, dir string, opts ContainerdOptions) (*Containerd, error) {
	bin, err := exec.LookPath("containerd")
	if err != nil {
		return nil, fmt.Errorf("containerd is not installed (Debian: apt-get install containerd runc; make deps-images): %w", err)
	}
	if _, err := exec.LookPath("runc"); err != nil {
		return nil, fmt.Errorf("runc is not installed (Debian: apt-get install runc; make deps-images): %w", err)
	}
	if opts.CRI && opts.SandboxImage == "" {
		return nil, errors.New("containerd: the CRI needs a SandboxImage")
	}
	c := &Containerd{Dir: dir, Socket: filepath.Join(dir, "containerd.sock"), Namespace: "k8s.io"}
	for _, d := range []string{"root", "state", "cni", "certs.d"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	for host, url := range opts.RegistryMirrors {
		hosts := fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "https://"+host, url)
		if err := os.MkdirAll(filepath.Join(dir, "certs.d", host), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(dir, "certs.d", host, "hosts.toml"), []byte(hosts), 0o644); err != nil {
			return nil, err
		}
	}
	config := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(config, []byte(containerdConfig(c, opts)), 0o644); err != nil {
		return nil, err
	}
	c.proc, err = startProcess("containerd", []string{bin, "--config", config}, filepath.Join(dir, "containerd.log"), false)
	if err != nil {
		return nil, err
	}
	for {
		if _, err := c.ctr(ctx, "version"); err == nil {
			return c, nil
		}
		if !c.proc.alive() {
			return nil, c.proc.exitedErr()
		}
		select {
		case <-ctx.Done():
			c.Stop()
			return nil, fmt.Errorf("containerd did not answer on %s: %w; last lines of its log:\n%s", c.Socket, ctx.Err(), tail(c.proc.Log, 5))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// containerdConfig is the version 2 configuration: everything under c.Dir;
// the CRI only when asked, with the settings a kubelet on this machine kind
// needs (cgroupfs, restrict_oom_score_adj since the kubelet runs in a
// container whose oom_score_adj a child may not lower).
func containerdConfig(c *Containerd, opts ContainerdOptions) string {
	var b strings.Builder
	fmt.Fprintf(&b, "version = 2\nroot = %q\nstate = %q\n", filepath.Join(c.Dir, "root"), filepath.Join(c.Dir, "state"))
	if !opts.CRI { // a top-level key: before the first table
		b.WriteString("disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n")
	}
	fmt.Fprintf(&b, "[grpc]\n  address = %q\n[ttrpc]\n  address = %q\n[debug]\n  address = \"\"\n[metrics]\n  address = \"\"\n",
		c.Socket, c.Socket+".ttrpc")
	if !opts.CRI {
		return b.String()
	}
	fmt.Fprintf(&b, `[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %q
`, opts.SandboxImage, cmp.Or(opts.CNIBinDir, cniBinDir), filepath.Join(c.Dir, "cni"), filepath.Join(c.Dir, "certs.d"))
	return b.String()
}

// Stop stops containerd (its containers' shims exit with their containers).
func (c *Containerd) Stop() {
	if c.proc != nil {
		c.proc.stop(10 * time.Second)
	}
}

// ctr runs Debian's ctr against this containerd and returns its output.
func (c *Containerd) ctr(ctx context.Context, args ...string) (string, error) {
	argv := append([]string{"--address", c.Socket, "--namespace", c.Namespace}, args...)
	out, err := exec.CommandContext(ctx, "ctr", argv...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Import imports and unpacks an OCI archive (make images writes them) and
// returns the name of the image it holds.
func (c *Containerd) Import(ctx context.Context, archive string) (string, error) {
	out, err := c.ctr(ctx, "images", "import", archive)
	if err != nil {
		return "", err
	}
	// "unpacking ghcr.io/nodewise/probe:v0.2.0 (sha256:…)...done"
	if f := strings.Fields(out); len(f) >= 2 && f[0] == "unpacking" {
		return f[1], nil
	}
	return "", fmt.Errorf("importing %s: no image name in ctr's output %q", archive, out)
}

// Run runs argv in a new container of image ref, waits for it to exit and
// returns its output. The container gets no network and is removed after.
func (c *Containerd) Run(ctx context.Context, ref, id string, argv ...string) (string, error) {
	return c.ctr(ctx, append([]string{"run", "--rm", ref, id}, argv...)...)
}

// Push pushes image ref, under the name target, to a plain-HTTP registry.
func (c *Containerd) Push(ctx context.Context, ref, target string) error {
	if _, err := c.ctr(ctx, "images", "tag", "--force", ref, target); err != nil {
		return err
	}
	_, err := c.ctr(ctx, "images", "push", "--plain-http", target)
	return err
}

// Remove removes the images and, at once, their content no image still needs.
func (c *Containerd) Remove(ctx context.Context, refs ...string) error {
	_, err := c.ctr(ctx, append([]string{"images", "rm", "--sync"}, refs...)...)
	return err
}

// Pull pulls and unpacks ref through the hosts.toml mirrors of
// ContainerdOptions.RegistryMirrors, as the CRI pulls a pod's image.
func (c *Containerd) Pull(ctx context.Context, ref string) error {
	_, err := c.ctr(ctx, "images", "pull", "--hosts-dir", filepath.Join(c.Dir, "certs.d"), ref)
	return err
}
