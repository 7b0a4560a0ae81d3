package testkit

import (
	"bufio"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

var servedURL = regexp.MustCompile(`http://[0-9.]+:[0-9]+(/[^\s]*)?`)

// Serve starts bin with args, a command that prints the URL it serves on
// its first line of stdout (such as `nodewise dashboard`), and returns that
// URL as printed, its path and query (a session's ?token=) included. When
// the test ends the process gets SIGTERM, and the test fails unless it exits
// cleanly within a minute.
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

// Session opens the URL a dashboard printed (its ?token= sets the session's
// cookie and redirects to the address without it) as a person's browser
// does, and returns a client that keeps that cookie. It fails t unless the
// URL lands with 200 at an address without the token.
func Session(t testing.TB, printed string) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar}
	resp, err := client.Get(printed)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Query().Has("token") {
		t.Fatalf("opening the printed URL %s: %s at %s; want 200 at the address without its token", printed, resp.Status, resp.Request.URL)
	}
	return client
}
