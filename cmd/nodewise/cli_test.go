package main

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/nodewise/nodewise/test/testkit"
)

const goodRollout = `apiVersion: nodewise.io/v1alpha1
kind: NodeRollout
metadata:
  name: up
spec:
  maxParallel: 2
  canaryNodes: [node-1]
`

// runIn runs the binary with stdin.
func runIn(bin, stdin string, args ...string) (stdout, stderr string, err error) {
	var o, e bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// oneLineFailure fails the test unless the command exited non-zero with
// nothing on stdout and one stderr line containing want.
func oneLineFailure(t *testing.T, what, stdout, stderr string, err error, want string) {
	t.Helper()
	msg := strings.TrimRight(stderr, "\n")
	if err == nil || stdout != "" || strings.Contains(msg, "\n") || !strings.Contains(msg, want) {
		t.Errorf("%s: exit %v, stdout %q, stderr %q; want a non-zero exit and one stderr line with %q", what, err, stdout, stderr, want)
	}
}

// Bad files get one line and a non-zero exit from plan --offline; nothing
// reaches a cluster (there is none).
func TestPlanOfflineRefusesBadFiles(t *testing.T) {
	bin := testkit.Binary(t, "nodewise")
	dir := t.TempDir()
	file := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, path, stdin, want string
	}{
		{"endless file", "/dev/zero", "", "larger than 8 MiB"},
		{"two documents", file("two.yaml", goodRollout+"---\n"+goodRollout), "", "holds 2 objects"},
		{"two JSON objects", "-", `{"apiVersion":"nodewise.io/v1alpha1","kind":"NodeRollout","metadata":{"name":"a"}} {"kind":"NodeRollout"}`, "holds 2 objects"},
		{"empty stdin", "-", "", "holds no object"},
		{"missing file", filepath.Join(dir, "nope.yaml"), "", "no such file"},
		{"key given twice", file("dup-key.yaml", goodRollout+"  maxParallel: 3\n"), "", `key "maxParallel" already set`},
		{"unknown field", file("typo.yaml", strings.Replace(goodRollout, "maxParallel", "maxParalel", 1)), "", `unknown field "spec.maxParalel"`},
		{"name not DNS-1123", file("name.yaml", strings.Replace(goodRollout, "name: up", "name: Up_Grade", 1)), "", `metadata.name: Invalid value: "Up_Grade"`},
		{"duplicate canary", file("canary.yaml", strings.Replace(goodRollout, "[node-1]", "[node-1, node-2, node-1]", 1)), "", `spec.canaryNodes[2]: Duplicate value: "node-1"`},
		{"bad drain policy", file("drain.yaml", goodRollout+"  drain: {policy: sometimes}\n"), "", "spec.drain.policy"},
	} {
		out, errOut, err := runIn(bin, tc.stdin, "plan", "--offline", "-f", tc.path)
		oneLineFailure(t, tc.name, out, errOut, err, tc.want)
	}
	// Stdin, and empty documents around the one object, are fine.
	out, errOut, err := runIn(bin, "---\n"+goodRollout+"---\n", "plan", "--offline", "-f", "-")
	if err != nil || !strings.Contains(out, "valid NodeRollout up") {
		t.Errorf("plan --offline -f - with empty documents around one object: %v %q %q", err, out, errOut)
	}
}

// A server that accepts connections but never answers fails the command
// after --request-timeout, with one line saying so.
func TestSilentServerTimesOut(t *testing.T) {
	bin := testkit.Binary(t, "nodewise")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c) // never answered
		}
	}()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://"+ln.Addr().String()+"\"}}]\nusers: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"status", "up"}, {"apply", "-f", "-"}, {"version"}} {
		out, errOut, err := runIn(bin, goodRollout, append([]string{"--kubeconfig", kc, "--request-timeout", "1s"}, args...)...)
		if args[0] == "version" { // the client's version is printed before the server is asked
			if !strings.HasPrefix(out, "Client: nodewise") {
				t.Errorf("version: stdout %q", out)
			}
			out = ""
		}
		oneLineFailure(t, strings.Join(args, " "), out, errOut, err, "did not answer within --request-timeout=1s")
	}
}

// No kubeconfig and no cluster: one line saying what to set, not a dial to
// localhost:8080.
func TestNoClusterConfigured(t *testing.T) {
	bin := testkit.Binary(t, "nodewise")
	cmd := exec.Command(bin, "status", "up")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+filepath.Join(t.TempDir(), "none"), "HOME="+t.TempDir(), "KUBERNETES_SERVICE_HOST=")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	oneLineFailure(t, "status without a kubeconfig", o.String(), e.String(), err, "no cluster configured: set KUBECONFIG")
}

// Installed as kubectl-nodewise, the help names `kubectl nodewise`.
func TestKubectlPluginName(t *testing.T) {
	bin := testkit.Binary(t, "nodewise")
	plugin := filepath.Join(t.TempDir(), "kubectl-nodewise")
	if err := os.Symlink(bin, plugin); err != nil {
		t.Fatal(err)
	}
	out, _, err := run(plugin, "status", "--help")
	if err != nil || !strings.Contains(out, "kubectl nodewise status NAME") {
		t.Errorf("kubectl-nodewise status --help: %v\n%s", err, out)
	}
	out, _, _ = run(bin, "--help")
	if !strings.Contains(out, "kubectl nodewise") || !strings.Contains(out, "nodewise [command]") {
		t.Errorf("nodewise --help does not say it is also kubectl nodewise:\n%s", out)
	}
	for _, f := range []string{"--context", "--namespace", "--as", "--request-timeout"} {
		if !strings.Contains(out, f) {
			t.Errorf("nodewise --help lacks kubectl's %s", f)
		}
	}
	// kubectl completes `kubectl nodewise sk<TAB>` by running
	// kubectl_complete-nodewise with the words typed.
	complete := filepath.Join(t.TempDir(), "kubectl_complete-nodewise")
	if err := os.Symlink(bin, complete); err != nil {
		t.Fatal(err)
	}
	out, _, err = run(complete, "sk")
	if err != nil || !strings.HasPrefix(out, "skew\t") && !strings.HasPrefix(out, "skew\n") {
		t.Errorf("kubectl_complete-nodewise sk: %v\n%q", err, out)
	}
}

// The krew manifest names the binary `make build` links and kubectl looks
// for, and every platform's archive has a sha256 placeholder hack/krew.sh fills.
func TestKrewManifest(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "deploy", "krew", "nodewise.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			Version          string `json:"version"`
			Homepage         string `json:"homepage"`
			ShortDescription string `json:"shortDescription"`
			Description      string `json:"description"`
			Platforms        []struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				URI    string `json:"uri"`
				SHA256 string `json:"sha256"`
				Bin    string `json:"bin"`
				Files  []struct {
					From string `json:"from"`
					To   string `json:"to"`
				} `json:"files"`
			} `json:"platforms"`
		} `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(data, &m); err != nil {
		t.Fatal(err)
	}
	if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" || m.Metadata.Name != "nodewise" || m.Spec.Version != "VERSION" || len(m.Spec.Platforms) == 0 {
		t.Fatalf("krew manifest: %+v", m)
	}
	oses := map[string]string{} // os -> one arch the manifest names for it
	for _, p := range m.Spec.Platforms {
		platform := p.Selector.MatchLabels["os"] + "_" + p.Selector.MatchLabels["arch"]
		if p.Bin != "kubectl-nodewise" || p.SHA256 != "SHA256_"+platform || !strings.HasSuffix(p.URI, "/VERSION/kubectl-nodewise_"+platform+".tar.gz") {
			t.Errorf("platform %s: %+v", platform, p)
		}
		oses[p.Selector.MatchLabels["os"]] = p.Selector.MatchLabels["arch"]
	}
	if oses["darwin"] == "" {
		t.Errorf("the manifest names no darwin platform: kubectl users on macOS cannot install it")
	}
	// Every OS the manifest names has its packages: none of the CLI's
	// imports is left without files by build tags (the simulator is
	// Linux-only per file). Compiling each OS is `make krew`'s own work (it
	// builds every platform of the manifest): a cold darwin build of the CLI
	// is about 10 minutes of CPU, more than the rest of this package.
	for goos, goarch := range oses {
		list := exec.Command("go", "list", "-e", "-deps", "-f", "{{with .Error}}{{.}}{{end}}{{range .DepsErrors}}{{.}}{{end}}", ".")
		list.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0")
		out, err := list.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "" {
			t.Errorf("kubectl-nodewise for %s/%s has broken packages: %v\n%s", goos, goarch, err, out)
		}
	}
}
