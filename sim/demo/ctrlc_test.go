package demo

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nodewise/nodewise/test/testkit"
)

// TestDemoCtrlCLeavesNothingBehind runs `nodewise demo` with the live data
// plane, sends SIGINT once traffic flows, and checks that no network
// namespace, process or mount of the run is left. Before that, the demo
// has printed the dashboard's address, and that address serves the
// dashboard's page of the rollout while the demo runs.
func TestDemoCtrlCLeavesNothingBehind(t *testing.T) {
	testkit.RequireNetns(t)
	bin := testkit.Binary(t, "nodewise")
	work := t.TempDir()
	cmd := exec.Command(bin, "demo", "--nodes", "3", "--zones", "1", "--redraw", "never", "--work-dir", work)
	cmd.Dir = testkit.RepoRoot()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	cmd.Stderr = &errOut // one line saying why, should the demo fail
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	prefixRE := regexp.MustCompile(`/run/netns/(nwdp[0-9a-f]+)-`)
	dashRE := regexp.MustCompile(`^   dashboard: (http://127\.0\.0\.1:[0-9]+/\S*) `)
	prefix, dashboard, interrupted := "", "", false
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		out.WriteString(line + "\n")
		if m := prefixRE.FindStringSubmatch(line); m != nil {
			prefix = m[1]
		}
		if m := dashRE.FindStringSubmatch(line); m != nil && dashboard == "" {
			dashboard = m[1]
		}
		// The first rollout has begun: pods, stand-ins and traffic all run.
		if !interrupted && strings.Contains(line, "  wave ") {
			if dashboard == "" {
				t.Errorf("the demo did not print the dashboard's address before its rollout began")
			} else if page, err := getPage(dashboard); err != nil || !strings.Contains(page, "upgrade-") {
				t.Errorf("the dashboard the demo printed (%s) does not list its rollout: %v %q", dashboard, err, lastLines(page, 5))
			}
			if len(listNetnsNamed(prefix)) == 0 {
				t.Errorf("no namespace of %q exists while the demo runs; the check below would prove nothing", prefix)
			}
			time.Sleep(2 * time.Second)
			if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			interrupted = true
		}
	}
	err = cmd.Wait()
	t.Logf("demo output:\n%s\nstderr:\n%s", out.String(), lastLines(errOut.String(), 20))
	if !interrupted {
		t.Fatalf("the demo ended (%v) before its rollout started", err)
	}
	if prefix == "" {
		t.Fatalf("the demo did not print its namespace prefix")
	}
	if left := listNetnsNamed(prefix); len(left) > 0 {
		t.Errorf("network namespaces left behind: %v", left)
	}
	if mounts, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(mounts, []byte(prefix)) || bytes.Contains(mounts, []byte(work)) {
		t.Errorf("mounts left behind:\n%s", grepLines(mounts, prefix, work))
	}
	if procs := processesMentioning(bin, work); len(procs) > 0 {
		t.Errorf("processes left behind: %v", procs)
	}
}

// getPage GETs url, as a browser opens the URL the dashboard printed (its
// token sets a cookie and redirects), and returns its body; a status other
// than 200 is an error.
func getPage(url string) (string, error) {
	jar, _ := cookiejar.New(nil)
	resp, err := (&http.Client{Jar: jar}).Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), err
}

func listNetnsNamed(prefix string) []string {
	if prefix == "" {
		return nil
	}
	entries, _ := os.ReadDir("/run/netns")
	var out []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out
}

func grepLines(data []byte, words ...string) string {
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		for _, w := range words {
			if strings.Contains(l, w) {
				out = append(out, l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// processesMentioning lists the processes whose command line contains any
// of words (our binary, or our cluster's state directory).
func processesMentioning(words ...string) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		s := strings.ReplaceAll(string(cmdline), "\x00", " ")
		for _, w := range words {
			if strings.Contains(s, w) {
				out = append(out, e.Name()+": "+s)
				break
			}
		}
	}
	return out
}

// lastLines is the end of a long log.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
