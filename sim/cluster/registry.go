package cluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// Registry is an OCI registry on loopback (distribution's, built from its Go
// module by `make tool-registry`), with its storage in the test's directory:
// nodewise's images and chart are pushed to it, and containerd pulls from it
// through a hosts.toml mirror (ContainerdOptions.RegistryMirrors), the way a
// cluster pulls from ghcr.io or a private mirror.
type Registry struct {
	// Host is its address, 127.0.0.1:PORT; it speaks plain HTTP.
	Host string

	proc *process
}

// StartRegistry starts the registry binary bin (bin/registry) with its
// storage in dir and waits until it serves the OCI distribution API.
func StartRegistry(ctx context.Context, bin, dir string) (*Registry, error) {
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("no registry binary (make tool-registry builds it): %w", err)
	}
	l, port, err := listenFree()
	if err != nil {
		return nil, err
	}
	l.Close()
	r := &Registry{Host: fmt.Sprintf("127.0.0.1:%d", port)}
	config := fmt.Sprintf(`version: 0.1
log:
  level: info
  accesslog:
    disabled: false
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
`, filepath.Join(dir, "storage"), r.Host)
	path := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
		return nil, err
	}
	// OTEL_TRACES_EXPORTER=none: distribution exports traces by default and
	// would retry an absent collector on every request.
	r.proc, err = startProcessEnv("registry", []string{bin, "serve", path}, filepath.Join(dir, "registry.log"), false, []string{"OTEL_TRACES_EXPORTER=none"})
	if err != nil {
		return nil, err
	}
	for {
		if resp, err := http.Get("http://" + r.Host + "/v2/"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return r, nil
			}
		}
		if !r.proc.alive() {
			return nil, r.proc.exitedErr()
		}
		select {
		case <-ctx.Done():
			r.Stop()
			return nil, fmt.Errorf("the registry did not answer on %s: %w", r.Host, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Log is the path of the registry's log (its access log included).
func (r *Registry) Log() string { return r.proc.Log }

// Stop stops the registry.
func (r *Registry) Stop() { r.proc.stop(5 * time.Second) }
