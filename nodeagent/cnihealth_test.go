package nodeagent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nodewise/nodewise/health/wire"
)

// cniNode is a node's CNI dirs as istio-cni leaves them when healthy
// (chained into the primary conflist, its kubeconfig, its plugin), for
// the tests to break one piece at a time.
type cniNode struct{ conf, bin string }

func newCNINode(t *testing.T, version string) cniNode {
	t.Helper()
	n := cniNode{conf: filepath.Join(t.TempDir(), "net.d"), bin: filepath.Join(t.TempDir(), "bin")}
	for _, d := range []string{n.conf, n.bin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.write(t, "10-calico.conflist", `{"cniVersion":"0.3.1","name":"k8s-pod-network","plugins":[{"type":"calico"},{"type":"portmap"},{"type":"istio-cni","kubernetes":{"kubeconfig":"/etc/cni/net.d/ZZZ-istio-cni-kubeconfig"}}]}`)
	n.write(t, "99-other.conf", `{"cniVersion":"0.3.1","name":"other","type":"bridge"}`)
	n.write(t, DefaultCNIKubeconfigName, `apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:1
    insecure-skip-tls-verify: true
users:
- name: istio-cni
  user:
    token: "abc"
contexts:
- name: istio-cni-context
  context:
    cluster: local
    user: istio-cni
current-context: istio-cni-context
`)
	n.plugin(t, version)
	return n
}

func (n cniNode) write(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(n.conf, name), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// plugin writes a plugin that prints what istio-cni prints with no CNI_COMMAND.
func (n cniNode) plugin(t *testing.T, version string) {
	t.Helper()
	script := "#!/bin/sh\necho 'CNI plugin istio-cni " + version + "' >&2\necho 'CNI protocol versions supported: 0.1.0, 1.0.0' >&2\n"
	if err := os.WriteFile(filepath.Join(n.bin, cniPluginName), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

func (n cniNode) agent(t *testing.T) *Agent {
	t.Helper()
	cfg := Config{Node: "n1", CertFile: "x", KeyFile: "y", TokenFile: "z", CNIConfDir: n.conf, CNIBinDir: n.bin}
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	return &Agent{cfg: cfg}
}

func check(t *testing.T, h wire.CNIHealth, name string) wire.CNICheck {
	t.Helper()
	for _, c := range h.Checks {
		if c.Check == name {
			return c
		}
	}
	t.Fatalf("no %s check in %+v", name, h.Checks)
	return wire.CNICheck{}
}

// TestCNIHealthyFilesPass: chained config, kubeconfig and plugin of the
// version asked for pass (the token is the API server's to judge: see
// test/e2e TestCNITokenRefusedByTheAPIServer).
func TestCNIHealthyFilesPass(t *testing.T) {
	n := newCNINode(t, "1.28.1")
	h := n.agent(t).CheckCNI(context.Background(), "1.28.1")
	for _, name := range []string{wire.CNICheckConfig, wire.CNICheckKubeconfig, wire.CNICheckPlugin} {
		if c := check(t, h, name); !c.OK {
			t.Errorf("%s failed on a healthy node: %+v", name, c)
		}
	}
	if c := check(t, h, wire.CNICheckConfig); c.File != filepath.Join(n.conf, "10-calico.conflist") {
		t.Errorf("config check read %s, want the primary conflist", c.File)
	}
	if c := check(t, h, wire.CNICheckPlugin); c.Detail != "version 1.28.1" {
		t.Errorf("plugin: %q", c.Detail)
	}
}

// TestCNIConfigWithoutIstioFails: a primary conflist without istio-cni (a
// primary CNI that rewrote it) fails, naming that file, even though a
// later file would hold it; an empty conf dir fails naming the dir.
func TestCNIConfigWithoutIstioFails(t *testing.T) {
	n := newCNINode(t, "1.28.1")
	n.write(t, "05-cilium.conflist", `{"cniVersion":"0.3.1","name":"cilium","plugins":[{"type":"cilium-cni"}]}`)
	c := check(t, n.agent(t).CheckCNI(context.Background(), ""), wire.CNICheckConfig)
	if c.OK || c.File != filepath.Join(n.conf, "05-cilium.conflist") || !strings.Contains(c.Detail, "no istio-cni plugin") {
		t.Errorf("want a failure naming 05-cilium.conflist: %+v", c)
	}

	empty := newCNINode(t, "1.28.1")
	for _, f := range []string{"10-calico.conflist", "99-other.conf"} {
		if err := os.Remove(filepath.Join(empty.conf, f)); err != nil {
			t.Fatal(err)
		}
	}
	c = check(t, empty.agent(t).CheckCNI(context.Background(), ""), wire.CNICheckConfig)
	if c.OK || c.File != empty.conf {
		t.Errorf("want a failure naming the conf dir: %+v", c)
	}
}

// TestCNIKubeconfigMissingFails: no kubeconfig fails that check, naming
// the file, and the token check says it could not run.
func TestCNIKubeconfigMissingFails(t *testing.T) {
	n := newCNINode(t, "1.28.1")
	path := filepath.Join(n.conf, DefaultCNIKubeconfigName)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	h := n.agent(t).CheckCNI(context.Background(), "")
	kc, tok := check(t, h, wire.CNICheckKubeconfig), check(t, h, wire.CNICheckToken)
	if kc.OK || kc.File != path || tok.OK || !strings.HasPrefix(tok.Detail, "not checked") {
		t.Errorf("kubeconfig %+v, token %+v", kc, tok)
	}
	if h.OK() {
		t.Error("the node is healthy without a kubeconfig")
	}
	got := strings.Join(h.Problems(), "\n")
	if !strings.Contains(got, "check kubeconfig failed on "+path) {
		t.Errorf("problems do not name the file: %s", got)
	}
	// A kubeconfig without a token fails too.
	n.write(t, DefaultCNIKubeconfigName, "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: https://x}\nusers:\n- name: u\n  user: {}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\ncurrent-context: x\n")
	if kc := check(t, n.agent(t).CheckCNI(context.Background(), ""), wire.CNICheckKubeconfig); kc.OK || !strings.Contains(kc.Detail, "no token") {
		t.Errorf("kubeconfig without a token: %+v", kc)
	}
}

// TestCNIKubeconfigInRunDir: an istio-cni whose plugin config names its
// run dir (cni_agent_run_dir, as the pinned Istio writes it) keeps its
// kubeconfig there, not in the conf dir: the check reads that one, and its
// absence fails naming it; a kubeconfig given in the Config wins.
func TestCNIKubeconfigInRunDir(t *testing.T) {
	n := newCNINode(t, "1.31.0")
	run := t.TempDir()
	n.write(t, "10-calico.conflist", `{"cniVersion":"0.3.1","name":"k8s-pod-network","plugins":[{"type":"calico"},{"type":"istio-cni","cni_agent_run_dir":"`+run+`"}]}`)
	b, err := os.ReadFile(filepath.Join(n.conf, DefaultCNIKubeconfigName))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(n.conf, DefaultCNIKubeconfigName)); err != nil {
		t.Fatal(err)
	}
	inRun := filepath.Join(run, "istio-cni-kubeconfig")
	if kc := check(t, n.agent(t).CheckCNI(context.Background(), ""), wire.CNICheckKubeconfig); kc.OK || kc.File != inRun {
		t.Errorf("no kubeconfig in the run dir: %+v, want a failure on %s", kc, inRun)
	}
	if err := os.WriteFile(inRun, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if kc := check(t, n.agent(t).CheckCNI(context.Background(), ""), wire.CNICheckKubeconfig); !kc.OK || kc.File != inRun {
		t.Errorf("the run dir's kubeconfig: %+v, want it read and passed", kc)
	}
	a := n.agent(t)
	a.cfg.CNIKubeconfig, a.cfg.cniKubeconfigDefault = filepath.Join(n.conf, "given"), false
	if kc := check(t, a.CheckCNI(context.Background(), ""), wire.CNICheckKubeconfig); kc.File != a.cfg.CNIKubeconfig {
		t.Errorf("a kubeconfig given in the Config was not the one read: %+v", kc)
	}
}

// TestCNIPluginWrongVersionFails: a plugin of another version than asked
// fails, naming the binary and both versions; a missing one fails too.
func TestCNIPluginWrongVersionFails(t *testing.T) {
	n := newCNINode(t, "1.27.3")
	path := filepath.Join(n.bin, cniPluginName)
	c := check(t, n.agent(t).CheckCNI(context.Background(), "1.28.1"), wire.CNICheckPlugin)
	if c.OK || c.File != path || !strings.Contains(c.Detail, "version 1.27.3, want 1.28.1") {
		t.Errorf("want a version failure: %+v", c)
	}
	if c := check(t, n.agent(t).CheckCNI(context.Background(), ""), wire.CNICheckPlugin); !c.OK || !strings.Contains(c.Detail, "no version expected") {
		t.Errorf("no version asked: %+v", c)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\necho hello\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if c := check(t, n.agent(t).CheckCNI(context.Background(), "1.28.1"), wire.CNICheckPlugin); c.OK || !strings.Contains(c.Detail, "printed no version") {
		t.Errorf("a plugin that prints no version: %+v", c)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if c := check(t, n.agent(t).CheckCNI(context.Background(), "1.28.1"), wire.CNICheckPlugin); c.OK || !strings.Contains(c.Detail, "no plugin binary") {
		t.Errorf("no plugin: %+v", c)
	}
}

// TestCNITokenCheckedByTokenReview: the token check sends the token in
// istio-cni's kubeconfig in a TokenReview under the agent's own client
// (never as istio-cni), and passes only when the API server authenticates
// it as istio-cni's ServiceAccount.
func TestCNITokenCheckedByTokenReview(t *testing.T) {
	const cniSA = "system:serviceaccount:istio-system:istio-cni"
	for _, tc := range []struct {
		name   string
		status authnv1.TokenReviewStatus
		err    error
		ok     bool
		detail string
	}{
		{"istio-cni's own token", authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: cniSA}}, nil, true, "accepted the token as " + cniSA},
		{"refused", authnv1.TokenReviewStatus{Error: "invalid bearer token"}, nil, false, "refused the token in istio-cni's kubeconfig: invalid bearer token"},
		{"another identity", authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "system:serviceaccount:default:builder"}}, nil, false, "authenticates as system:serviceaccount:default:builder, not istio-cni's ServiceAccount " + cniSA},
		{"no answer", authnv1.TokenReviewStatus{}, errors.New("connection refused"), false, "cannot tell whether the API server accepts the token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newCNINode(t, "1.28.1")
			kube := fake.NewClientset()
			var reviewed []string
			kube.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
				tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
				reviewed = append(reviewed, tr.Spec.Token)
				if tc.err != nil {
					return true, nil, tc.err
				}
				out := tr.DeepCopy()
				out.Status = tc.status
				return true, out, nil
			})
			ag := n.agent(t)
			ag.cfg.CNITokenReviews = kube.AuthenticationV1().TokenReviews()
			c := check(t, ag.CheckCNI(context.Background(), ""), wire.CNICheckToken)
			if c.OK != tc.ok || !strings.Contains(c.Detail, tc.detail) || c.File != filepath.Join(n.conf, DefaultCNIKubeconfigName) {
				t.Errorf("token check %+v, want ok=%v with %q", c, tc.ok, tc.detail)
			}
			if len(reviewed) != 1 || reviewed[0] != "abc" {
				t.Errorf("reviewed tokens %q, want the kubeconfig's one token", reviewed)
			}
		})
	}

	// Without a Kubernetes API there is no review: the check fails, saying so.
	c := check(t, newCNINode(t, "1.28.1").agent(t).CheckCNI(context.Background(), ""), wire.CNICheckToken)
	if c.OK || !strings.Contains(c.Detail, "no Kubernetes API") {
		t.Errorf("no reviews: %+v", c)
	}
}
