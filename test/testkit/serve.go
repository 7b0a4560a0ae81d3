package testkit

import (
	"bufio"
	"io"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

var servedURL = regexp.MustCompile(`http://[0-9.]+:[0-9]+`)

// Serve starts bin with args, a command that prints the URL it serves on
// its first line of stdout (such as `nodewise dashboard`), and returns that
// URL. When the test ends the process gets SIGTERM, and the test fails
// unless it exits cleanly within a minute.
func Serve(t testing.TB, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewReader(stdout)
	first, readErr := lines.ReadString('\n')
	exited := make(chan error, 1)
	go func() { _, _ = io.Copy(io.Discard, lines); exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("%s on SIGTERM: %v (stderr %q)", bin, err, stderr.String())
			}
		case <-time.After(time.Minute): // a bound on a hung process, not a timing assertion
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("%s did not stop within a minute of SIGTERM", bin)
		}
	})
	url := servedURL.FindString(first)
	if readErr != nil || url == "" {
		t.Fatalf("%s printed no URL on its first line %q: %v (stderr %q)", bin, first, readErr, stderr.String())
	}
	return url
}
