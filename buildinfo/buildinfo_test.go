package buildinfo

import (
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestRegisterPublishesBuildInfoAndRuntimeCollectors(t *testing.T) {
	version = "v1.2.3"
	t.Cleanup(func() { version = "" })
	reg := prometheus.NewRegistry()
	if err := Register(reg, "orchestrator"); err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range fams {
		names = append(names, f.GetName())
	}
	all := strings.Join(names, " ")
	for _, want := range []string{"nodewise_build_info", "go_goroutines", "process_start_time_seconds"} {
		if !strings.Contains(all, want) {
			t.Errorf("registry lacks %s (has %s)", want, all)
		}
	}
	const exp = `
# HELP nodewise_build_info Always 1; its labels name the component, its version and the Go version it was built with.
# TYPE nodewise_build_info gauge
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(exp+`nodewise_build_info{component="orchestrator",goversion="`+runtime.Version()+`",version="v1.2.3"} 1`+"\n"), "nodewise_build_info"); err != nil {
		t.Error(err)
	}
	if err := Register(reg, "orchestrator"); err == nil {
		t.Error("registering twice succeeded; want a duplicate-collector error")
	}
}

func TestVersionFallsBackWithoutLdflags(t *testing.T) {
	version = ""
	if v := Version(); v != "dev" && !strings.HasPrefix(v, "dev+") {
		t.Errorf("Version() = %q without ldflags; want dev or dev+REVISION", v)
	}
}
