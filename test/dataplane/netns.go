package dataplane

import (
	"bytes"
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

// enterNetns locks the calling goroutine to its thread and moves the thread
// into the namespace for good: sockets the goroutine creates afterwards live
// there. The thread is discarded when the goroutine exits (it stays locked),
// so call it only in a goroutine of its own.
func enterNetns(name string) error {
	runtime.LockOSThread()
	fd, err := unix.Open(filepath.Join(netnsDir, name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening netns %s: %w", name, err)
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("entering netns %s: %w", name, err)
	}
	return nil
}

// inNetns runs fn on a fresh goroutine inside the namespace and waits for it.
func inNetns(name string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		if err := enterNetns(name); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}
