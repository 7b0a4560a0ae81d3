// Package buildinfo is the version every nodewise binary carries, and the
// nodewise_build_info metric that publishes it beside the process and Go
// runtime collectors.
package buildinfo

import (
	"errors"
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// version is set at link time by `make build`:
//
//	-ldflags '-X github.com/nodewise/nodewise/buildinfo.version=$(git describe --tags --always --dirty)'
var version string

// Version is the link-time version, else the VCS revision go build embedded
// ("dev+1a2b3c4d", with "-dirty" for a modified tree), else "dev".
func Version() string {
	if version != "" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev == "" {
		return "dev"
	}
	return "dev+" + rev + dirty
}

// Register adds nodewise_build_info{component,version,goversion} (always 1)
// and the process_ and go_ collectors to reg.
func Register(reg prometheus.Registerer, component string) error {
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "nodewise_build_info",
		Help: "Always 1; its labels name the component, its version and the Go version it was built with.",
	}, []string{"component", "version", "goversion"})
	info.WithLabelValues(component, Version(), runtime.Version()).Set(1)
	return errors.Join(
		reg.Register(info),
		reg.Register(collectors.NewGoCollector()),
		reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})),
	)
}
