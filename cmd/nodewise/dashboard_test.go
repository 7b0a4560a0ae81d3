package main

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/browser"
	"github.com/nodewise/nodewise/test/testkit"
)

// dashboardCluster is the simulated cluster's API server with the CRDs,
// Istio and rollout "up" applied by the built CLI, halted at its node (the
// status an orchestrator writes, set by the test); it returns the node.
func dashboardCluster(t *testing.T, bin string) (*cluster.Cluster, *v1alpha1.Client, string) {
	t.Helper()
	ctx := context.Background()
	c := cluster.Start(t, cluster.Options{Nodes: 1, Zones: 1})
	node := c.Nodes[0].Name
	for _, crd := range []string{"nodewise.io_noderollouts.yaml", "nodewise.io_revisionmigrations.yaml"} {
		if err := cluster.InstallCRD(ctx, c.Config, filepath.Join("..", "..", "deploy", "crds", crd)); err != nil {
			t.Fatal(err)
		}
	}
	if err := cluster.InstallIstio(ctx, c.Client, cluster.IstioOptions{Version: "1.27.3", SkipSamples: true}); err != nil {
		t.Fatal(err)
	}
	if out, errOut, err := runIn(bin, strings.Replace(goodRollout, "node-1", node, 1), "--kubeconfig="+c.Kubeconfig, "apply", "-f", "-"); err != nil {
		t.Fatalf("apply: %v %q %q", err, out, errOut)
	}
	nwc, err := v1alpha1.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	setPhase(t, nwc.NodeRollouts(), "up", v1alpha1.PhaseHalted, "node "+node+" failed: resets received 0 → 41", node, v1alpha1.NodeFailed)
	return c, nwc, node
}

// TestDashboardCommandOnTheSimCluster runs the built `nodewise dashboard`
// against the simulated cluster's API server: it prints its address, its
// rollout page names a halted rollout's node (the status an orchestrator
// writes, set by the test), `chromium --headless --dump-dom` of that
// address names it too, and SIGTERM stops it cleanly (testkit.Serve).
func TestDashboardCommandOnTheSimCluster(t *testing.T) {
	bin := testkit.Binary(t, "nodewise")
	ctx := context.Background()
	c, _, node := dashboardCluster(t, bin)

	printed := testkit.Serve(t, bin, "--kubeconfig="+c.Kubeconfig, "dashboard", "--address=127.0.0.1:0")
	if !strings.HasPrefix(printed, "http://127.0.0.1:") {
		t.Fatalf("nodewise dashboard serves on %s, want the loopback address it was given", printed)
	}
	pu, err := url.Parse(printed)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + pu.Host
	rollout := base + "/rollouts/up"

	resp, err := testkit.Session(t, printed).Get(rollout)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := `class="halted-node">` + node + `<`
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(page), want) {
		t.Errorf("GET %s: %s, %d bytes; want 200 naming the halted node %s", rollout, resp.Status, len(page), node)
	}
	// A one-shot browser has no session: the printed URL's token, on the
	// rollout page's address.
	dom, err := browser.DumpDOM(ctx, rollout+"?"+pu.RawQuery)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dom, want) {
		t.Errorf("chromium --dump-dom %s does not name the halted node %s", rollout, node)
	}
	dashboardFreshness(t, c, bin, node)
}

// dashboardFreshness: /freshness of the built command, on the real API
// server, gives team payments' line for its pod a minor behind the
// installed istiod (the target flags reach the page), and a user whose RBAC
// reads NodeRollouts but not pods gets 403 and the page saying so.
func dashboardFreshness(t *testing.T, c *cluster.Cluster, bin, node string) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"team": "payments"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cart-0", Labels: map[string]string{"owner": "ana"}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "app:1"}, {Name: istio.ProxyContainer, Image: "istio/proxyv2:1.26.2"}}}}
	if _, err := c.Client.CoreV1().Pods("shop").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	get := func(printed, path string) (int, string) {
		t.Helper()
		pu, err := url.Parse(printed)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := testkit.Session(t, printed).Get("http://" + pu.Host + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		page, _, _ := strings.Cut(string(b), "</main>")
		_, main, _ := strings.Cut(page, "<main")
		return resp.StatusCode, main // the page's own part, without the inlined style
	}
	printed := testkit.Serve(t, bin, "--kubeconfig="+c.Kubeconfig, "dashboard", "--address=127.0.0.1:0", "--freshness-max-minors-behind=0", "--freshness-max-age=30d")
	code, page := get(printed, "/freshness?team=payments")
	want := `<p class="team-line">payments: 1 of 1 pods behind 1.27.3 (up to 1 minor); the oldest pod is `
	if code != http.StatusOK || !strings.Contains(page, want) || !strings.Contains(page, "Target: at most 0 minor releases behind 1.27.3, pods younger than 30d.") ||
		!strings.Contains(page, "<td>Pod cart-0</td><td>ana</td><td>1 of 1</td><td>1.26.2</td>") {
		t.Errorf("GET /freshness?team=payments: %d; want 200 with payments' line %q, the target and cart-0's row:\n%s", code, want, page)
	}

	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "rollout-viewer"}, Rules: []rbacv1.PolicyRule{{APIGroups: []string{"nodewise.io"},
		Resources: []string{"noderollouts", "revisionmigrations"}, Verbs: []string{"get", "list", "watch"}}}}
	if _, err := c.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "rollout-viewer"}, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "viewer"}}}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	printed = testkit.Serve(t, bin, "--kubeconfig="+c.Kubeconfig, "--as=viewer", "dashboard", "--address=127.0.0.1:0")
	code, page = get(printed, "/freshness")
	if code != http.StatusForbidden || !strings.Contains(page, `Forbidden: the dashboard&#39;s credentials may not read what freshness needs`) ||
		!strings.Contains(page, `User &#34;viewer&#34; cannot list resource`) {
		t.Errorf("GET /freshness as viewer: %d; want 403 saying what it may not list:\n%s", code, page)
	}
	if code, _ := get(printed, "/rollouts/up"); code != http.StatusOK {
		t.Errorf("GET /rollouts/up as viewer: %d; the other pages keep working", code)
	}
}

// TestDashboardCommandAnswersOnlyItsSession: the built `nodewise dashboard`
// against the real API server refuses a DNS-rebinding Host, a page and an
// action without the session token printed at its start (a second local
// user's curl), and the rollout stays unpaused; the printed URL, opened,
// gives the pages and a pause the API server records.
func TestDashboardCommandAnswersOnlyItsSession(t *testing.T) {
	bin := testkit.Binary(t, "nodewise")
	ctx := context.Background()
	c, nwc, _ := dashboardCluster(t, bin)
	printed := testkit.Serve(t, bin, "--kubeconfig="+c.Kubeconfig, "dashboard", "--address=127.0.0.1:0")
	pu, err := url.Parse(printed)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + pu.Host
	do := func(client *http.Client, method, path string, header map[string]string, host string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, nil)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		if host != "" {
			req.Host = host
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, strings.TrimSpace(string(b))
	}
	paused := func() bool {
		t.Helper()
		nr, err := nwc.NodeRollouts().Get(ctx, "up", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return nr.Spec.Paused
	}
	curl := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	action := map[string]string{"X-Nodewise-Action": "1"}

	_, port, _ := strings.Cut(pu.Host, ":")
	if code, body := do(testkit.Session(t, printed), http.MethodGet, "/rollouts/up", nil, "evil.example:"+port); code != http.StatusMisdirectedRequest {
		t.Errorf("GET /rollouts/up with the rebinding Host evil.example:%s: %d %.80q; want 421", port, code, body)
	}
	if code, body := do(curl, http.MethodPost, "/rollouts/up/actions/pause", action, ""); code != http.StatusUnauthorized {
		t.Errorf("a second local user's pause (no token, no Origin): %d %q; want 401", code, body)
	}
	if paused() {
		t.Errorf("a pause without the session token paused NodeRollout up")
	}
	if code, body := do(curl, http.MethodGet, "/rollouts/up", nil, ""); code != http.StatusUnauthorized || !strings.Contains(body, "printed") {
		t.Errorf("GET /rollouts/up without the session token: %d %.80q; want 401 saying where the URL was printed", code, body)
	}

	s := testkit.Session(t, printed)
	if code, body := do(s, http.MethodGet, "/rollouts/up", nil, ""); code != http.StatusOK || !strings.Contains(body, "NodeRollout up") {
		t.Errorf("GET /rollouts/up in the printed URL's session: %d %.200q", code, body)
	}
	if code, body := do(s, http.MethodPost, "/rollouts/up/actions/pause", map[string]string{"X-Nodewise-Action": "1", "Origin": base}, ""); code != http.StatusOK {
		t.Errorf("pause in the printed URL's session: %d %q", code, body)
	}
	if !paused() {
		t.Errorf("the session's pause did not reach the API server")
	}
	token := pu.Query().Get("token")
	if code, body := do(curl, http.MethodPost, "/rollouts/up/actions/resume", map[string]string{"X-Nodewise-Action": "1", "Authorization": "Bearer " + token}, ""); code != http.StatusOK || paused() {
		t.Errorf("resume with Authorization: Bearer and the session token: %d %q (paused %v)", code, body, paused())
	}

	// --allowed-host adds a name; a malformed one stops the command.
	printed = testkit.Serve(t, bin, "--kubeconfig="+c.Kubeconfig, "dashboard", "--address=127.0.0.1:0", "--allowed-host=dash.example")
	if pu, err = url.Parse(printed); err != nil {
		t.Fatal(err)
	}
	base, bearer := "http://"+pu.Host, map[string]string{"Authorization": "Bearer " + pu.Query().Get("token")}
	if code, body := do(curl, http.MethodGet, "/rollouts/up", bearer, "dash.example:8080"); code != http.StatusOK {
		t.Errorf("GET with --allowed-host=dash.example's Host: %d %.80q", code, body)
	}
	if code, body := do(curl, http.MethodGet, "/rollouts/up", bearer, "other.example:8080"); code != http.StatusMisdirectedRequest {
		t.Errorf("GET with a Host not allowed: %d %.80q; want 421", code, body)
	}
	if out, errOut, err := runIn(bin, "", "--kubeconfig="+c.Kubeconfig, "dashboard", "--address=127.0.0.1:0", "--allowed-host=http://dash.example"); err == nil || !strings.Contains(errOut, "--allowed-host") {
		t.Errorf("--allowed-host=http://dash.example: %v %q %q; want it refused, naming the flag", err, out, errOut)
	}
}

// TestDashboardAgentFlags: the agents' CA without their token is refused
// in one line naming the missing flag, before the dashboard listens (the
// two together give the node pages their history to plot).
func TestDashboardAgentFlags(t *testing.T) {
	bin := testkit.Binary(t, "nodewise")
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\nusers: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := runIn(bin, "", "--kubeconfig", kc, "dashboard", "--address=127.0.0.1:0", "--agent-ca", filepath.Join(t.TempDir(), "ca.pem"))
	oneLineFailure(t, "dashboard --agent-ca alone", out, errOut, err, "a token file (--agent-token-file)")
}

// TestDashboardFreshnessFlags: a malformed /freshness target is refused in
// one line naming the flag, before the dashboard listens.
func TestDashboardFreshnessFlags(t *testing.T) {
	bin := testkit.Binary(t, "nodewise")
	for _, tc := range []struct{ flag, want string }{
		{"--freshness-max-age=soon", "--freshness-max-age: \"soon\""},
		{"--freshness-max-minors-behind=-1", "--freshness-max-minors-behind -1: want 0 or more"},
	} {
		out, errOut, err := runIn(bin, "", "--kubeconfig", filepath.Join(t.TempDir(), "none"), "dashboard", "--address=127.0.0.1:0", tc.flag)
		oneLineFailure(t, "dashboard "+tc.flag, out, errOut, err, tc.want)
	}
}
