package dataplane

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// netnsDir is where iproute2 keeps named network namespaces.
const netnsDir = "/run/netns"

// run runs a command and returns its combined output in the error.
func run(stdin string, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func ip(args ...string) error { return run("", "ip", args...) }

// addNetns creates a named network namespace with its loopback up.
func addNetns(name string) error {
	if err := ip("netns", "add", name); err != nil {
		return err
	}
	return ip("-n", name, "link", "set", "lo", "up")
}

// delNetns removes a named network namespace; a missing one is not an error.
func delNetns(name string) error {
	if _, err := os.Stat(filepath.Join(netnsDir, name)); os.IsNotExist(err) {
		return nil
	}
	return ip("netns", "del", name)
}

// listNetns lists the named namespaces whose names start with prefix.
func listNetns(prefix string) []string {
	entries, _ := os.ReadDir(netnsDir)
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

// inNetns runs fn on the calling goroutine with its thread moved into the
// namespace: sockets fn creates live there. The thread is moved back and
// unlocked afterwards. It must never be left to exit in another namespace:
// the simulated cluster starts its components with Pdeathsig, so a thread
// that exits kills the components it happened to start.
func inNetns(name string, fn func() error) error {
	runtime.LockOSThread()
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("opening this thread's netns: %w", err)
	}
	defer unix.Close(orig)
	fd, err := unix.Open(filepath.Join(netnsDir, name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("opening netns %s: %w", name, err)
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("entering netns %s: %w", name, err)
	}
	ferr := fn()
	if err := unix.Setns(orig, unix.CLONE_NEWNET); err != nil {
		// Stay locked: this thread cannot be reused, so the runtime ends it
		// with the goroutine. Callers run inNetns on goroutines that started
		// no process.
		return errors.Join(ferr, fmt.Errorf("returning from netns %s: %w", name, err))
	}
	runtime.UnlockOSThread()
	return ferr
}
