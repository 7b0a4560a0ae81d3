package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// StrictEnv names the variable `make test` sets: there a test whose machine
// lacks what it needs (root, BTF, iproute2, nftables, a cgroup v2 mount) fails
// instead of skipping, so a missing package or privilege can never pass as a
// green run. Outside make test (a developer's `go test` as non-root) the same
// test skips and says why.
const StrictEnv = "NODEWISE_TEST_STRICT"

// Unavailable ends tb because the machine lacks what it needs: a failure
// when StrictEnv is set, a skip that says why otherwise.
func Unavailable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	why := fmt.Sprintf(format, args...)
	if os.Getenv(StrictEnv) != "" {
		tb.Fatalf("%s (%s is set, so this is a failure, not a skip)", why, StrictEnv)
	}
	tb.Skipf("SKIP: %s", why)
}

// RequireRoot ends tb through Unavailable unless the process is root.
func RequireRoot(tb testing.TB, forWhat string) {
	tb.Helper()
	if os.Geteuid() != 0 {
		Unavailable(tb, "not root (euid %d): cannot %s", os.Geteuid(), forWhat)
	}
}

// RequireBTF ends tb through Unavailable unless the kernel exposes BTF, which
// the eBPF programs need.
func RequireBTF(tb testing.TB) {
	tb.Helper()
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		Unavailable(tb, "kernel has no BTF (%v): the eBPF programs need it", err)
	}
}

// RequireTools ends tb through Unavailable unless every named command is on
// PATH.
func RequireTools(tb testing.TB, tools ...string) {
	tb.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			Unavailable(tb, "%s not installed (run make deps): %v", tool, err)
		}
	}
}

// RequireNetns ends tb through Unavailable unless it can build the live data
// plane's network namespaces: root, iproute2 and nftables.
func RequireNetns(tb testing.TB) {
	tb.Helper()
	RequireRoot(tb, "create network namespaces")
	RequireTools(tb, "ip", "nft")
}
