// Package promrig runs the real Prometheus (bin/prometheus, built by
// `hack/build-tool.sh prometheus`) on loopback for tests, scraping the
// targets a test serves, and the real Alertmanager (bin/alertmanager,
// `hack/build-tool.sh alertmanager`) whose API a test calls.
package promrig

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Target is one scrape target: a host:port and the target labels
// Prometheus gives its series (as a kubernetes-pods job's relabelling would).
type Target struct {
	Addr   string
	Labels map[string]string
	// HTTPS scrapes https://Addr/metrics, trusting CAFile, with the bearer
	// token in TokenFile (as a node agent's /metrics wants).
	HTTPS     bool
	CAFile    string
	TokenFile string
}

// Server is a running Prometheus.
type Server struct {
	// URL is its base URL, http://127.0.0.1:PORT.
	URL string
	cmd *exec.Cmd
	// fresh starts the server again with empty storage (Alertmanager's Restart).
	fresh func(testing.TB)
}

// Kill stops the server (the process this test started), as a server that
// went down; it is also killed when the test ends.
func (s *Server) Kill() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// Start runs Prometheus scraping targets every second and returns it once it
// is ready. The process is killed when the test ends.
func Start(t testing.TB, targets ...Target) *Server {
	t.Helper()
	return StartWithRules(t, "", targets...)
}

// StartWithRules is Start with a rule file (Prometheus' rule-file YAML,
// evaluated every second), for tests of alerts that fire.
func StartWithRules(t testing.TB, rules string, targets ...Target) *Server {
	t.Helper()
	bin := find(t, "prometheus")
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n")
	if rules != "" {
		rf := filepath.Join(dir, "rules.yml")
		if err := os.WriteFile(rf, []byte(rules), 0o600); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "rule_files: [%q]\n", rf)
	}
	var plain, https []Target
	for _, tg := range targets {
		if tg.HTTPS {
			https = append(https, tg)
		} else {
			plain = append(plain, tg)
		}
	}
	if len(targets) > 0 {
		b.WriteString("scrape_configs:\n")
	}
	if len(plain) > 0 {
		b.WriteString("  - job_name: rig\n    static_configs:\n")
		for _, tg := range plain {
			writeTarget(&b, tg)
		}
	}
	// A job per HTTPS target: each may have its own CA and token.
	for i, tg := range https {
		fmt.Fprintf(&b, "  - job_name: rig-https-%d\n    scheme: https\n    tls_config:\n      ca_file: %q\n", i, tg.CAFile)
		if tg.TokenFile != "" {
			fmt.Fprintf(&b, "    authorization:\n      credentials_file: %q\n", tg.TokenFile)
		}
		b.WriteString("    static_configs:\n")
		writeTarget(&b, tg)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	srv := &Server{URL: "http://" + addr}
	srv.cmd = run(t, cmd, filepath.Join(dir, "prometheus.log"))
	waitReady(t, "prometheus", srv.URL)
	return srv
}

// freeAddr is a loopback address with a free port.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// run starts cmd with its output in logPath; the process is killed when the
// test ends, and its log shown if the test failed.
func run(t testing.TB, cmd *exec.Cmd, logPath string) *exec.Cmd {
	t.Helper()
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("%s log:\n%s", filepath.Base(cmd.Path), b)
		}
	})
	return cmd
}

// waitReady waits until the server at url answers /-/ready.
func waitReady(t testing.TB, name, url string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // a bound on a broken rig, not a timing assertion
	for {
		resp, err := http.Get(url + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s on %s never became ready", name, url)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// writeTarget writes one static_configs entry.
func writeTarget(b *strings.Builder, tg Target) {
	fmt.Fprintf(b, "      - targets: [%q]\n", tg.Addr)
	if len(tg.Labels) > 0 {
		b.WriteString("        labels:\n")
		for k, v := range tg.Labels {
			fmt.Fprintf(b, "          %s: %q\n", k, v)
		}
	}
}

// find looks for the binary name in $NODEWISE_BIN_DIR, then in every bin/
// from the working directory up.
func find(t testing.TB, name string) string {
	t.Helper()
	var dirs []string
	if env := os.Getenv("NODEWISE_BIN_DIR"); env != "" {
		dirs = append(dirs, env)
	}
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			dirs = append(dirs, filepath.Join(d, "bin"))
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	t.Fatalf("%s not found in %v: run `hack/build-tool.sh %s` (or `make tools`, or set NODEWISE_BIN_DIR)", name, dirs, name)
	return ""
}
