package demo

import (
	"context"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/browser"
	"github.com/nodewise/nodewise/test/testkit"
)

// TestLiveDashboardShowsTheHalt: a faulty ztunnel build (-rst) rolled on
// the live data plane halts at its canary, watched in headless Chromium on
// the page the built `nodewise dashboard` serves, run as a person runs it
// with the cluster's kubeconfig (and stopped with SIGTERM at the end). The rollout page, open before the halt,
// shows the canary's state change without a reload; then it names the
// halted node and its reason, and the node's page has a before → after row
// for a pod of that node and plots, from the real agents' history (the
// command is given their CA and token), the probe and the control nodes
// over the baseline and the soak. `chromium --dump-dom` of the page names
// the node.
// Screenshots go to $NODEWISE_SCREENSHOTS (docs/dashboard has the ones the
// docs show).
func TestLiveDashboardShowsTheHalt(t *testing.T) {
	t.Parallel()
	bin := testkit.Binary(t, "nodewise")
	e := newLiveEnv(t, 3)
	ctx := context.Background()
	printed := testkit.Serve(t, bin, "--kubeconfig="+e.c.Kubeconfig, "dashboard", "--address=127.0.0.1:0",
		"--agent-ca="+e.agents.CAFile, "--agent-token-file="+e.agents.TokenFile, "--agent-port="+strconv.Itoa(e.agents.Port))
	pu, err := url.Parse(printed)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + pu.Host
	tab := browser.New(t) // closed before the server stops
	// As a person opens the printed URL: the session's cookie.
	if err := chromedp.Do(tab, chromedp.Navigate(printed)); err != nil {
		t.Fatal(err)
	}
	shots := browser.ScreenshotDir(t)

	node := e.faultyBuild(cluster.ZtunnelName, "1.27.4-rst")
	// The rollout's page, open before the rollout exists: it fills in and
	// follows the canary from the event stream alone. A MutationObserver
	// records each state the canary's row shows.
	tctx, cancel := context.WithTimeout(tab, 10*time.Minute)
	defer cancel()
	row := "#node-" + node + " td.state"
	if err := chromedp.Do(tctx, chromedp.Navigate(base+"/rollouts/rst")); err != nil {
		t.Fatal(err)
	}
	if err := browser.WaitTrue(tctx, `document.getElementById("live").textContent === "live"`); err != nil {
		t.Fatal(err)
	}
	if _, err := browser.Eval[bool](tctx, `window.__sameDocument = true; window.__states = [];
		new MutationObserver(() => {
			const c = document.querySelector("`+row+`");
			const s = c ? c.textContent.trim() : "";
			if (s && window.__states[window.__states.length - 1] !== s) window.__states.push(s);
		}).observe(document.getElementById("main"), {childList: true, subtree: true, characterData: true});
		true`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.rc.Create(ctx, faultyRollout("rst", node, true), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := browser.WaitTrue(tctx, `window.__states.some(s => s !== "Pending" && s !== "Failed")`); err != nil {
		t.Fatalf("the page never showed %s in flight: %v", node, err)
	}
	if _, err := browser.Screenshot(tctx, shots, "rollout-in-flight"); err != nil {
		t.Error(err)
	}
	if err := browser.WaitTrue(tctx, `document.querySelector("`+row+`").textContent.includes("Failed")`); err != nil {
		t.Fatalf("the page never showed %s Failed: %v", node, err)
	}
	states, _ := browser.Eval[[]string](tctx, `window.__states`)
	if same, err := browser.Eval[bool](tctx, `window.__sameDocument === true`); err != nil || !same {
		t.Errorf("the page reloaded to show %s's changes (%v)", node, err)
	}
	t.Logf("%s's states on the page, without a reload: %q", node, states)
	// The live page re-renders on every event: the banner is read in the
	// same step that finds it (a node found first and read after could be
	// replaced in between, and read as nothing).
	if err := browser.WaitTrue(tctx, `document.getElementById("halt") !== null`); err != nil {
		t.Fatal(err)
	}
	halt, err := browser.Eval[string](tctx, `(document.getElementById("halt") || {}).textContent || ""`)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("halt banner: %s", halt)
	if !strings.Contains(halt, "Halted at "+node) || !strings.Contains(halt, "resets") || !strings.Contains(halt, "nodewise rollback rst") {
		t.Errorf("the halt banner does not name %s, its resets and what to do: %q", node, halt)
	}
	if _, err := browser.Screenshot(tctx, shots, "rollout-halted"); err != nil {
		t.Error(err)
	}

	// The node's page: a before → after row for a pod of that node.
	pods, err := e.c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	onNode := map[string]bool{}
	for _, p := range pods.Items {
		onNode[p.Namespace+"/"+p.Name] = true
	}
	if err := chromedp.Do(tctx, chromedp.Navigate(base+"/rollouts/rst/nodes/"+node), chromedp.WaitVisible(chromedp.CSS("table.evidence"))); err != nil {
		t.Fatal(err)
	}
	rows, err := browser.Eval[[][]string](tctx, `[...document.querySelectorAll("table.evidence tr[data-pod]")].filter(r => r.dataset.pod).map(r => [r.dataset.pod, r.querySelector("td.ba").textContent])`)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, r := range rows {
		pod := strings.TrimSuffix(r[0], " (proxy)")
		if onNode[pod] && strings.Contains(r[1], " → ") {
			found = append(found, r[0]+": "+r[1])
		}
	}
	if len(found) == 0 {
		t.Errorf("no before → after row for a pod of %s among %q", node, rows)
	}
	t.Logf("before → after rows of %s's pods: %q", node, found)
	ages, err := browser.Eval[[][]string](tctx, `[...document.querySelectorAll("table.ages tr[data-pod]")].map(r => [r.dataset.pod, r.querySelector("td.ages").textContent])`)
	if err != nil {
		t.Fatal(err)
	}
	var aged []string
	for _, r := range ages {
		if onNode[strings.TrimSuffix(r[0], " (proxy)")] && strings.Contains(r[1], " open") && strings.Contains(r[1], " → ") {
			aged = append(aged, r[0]+": "+r[1])
		}
	}
	if len(aged) == 0 {
		t.Errorf("no connection ages before → after for a pod of %s among %q", node, ages)
	}
	t.Logf("connection ages of %s's pods: %q", node, aged)
	if _, err := browser.Screenshot(tctx, shots, "node-evidence"); err != nil {
		t.Error(err)
	}
	// Its plots, from the real agents' history: the probe's and the control
	// nodes' series over the baseline and the soak, the swap marked.
	drawn, err := browser.Eval[[]string](tctx, `[...document.querySelectorAll('#plots svg[data-plot="resets"] g[data-series]')].map(g => g.dataset.series + "/" + g.dataset.window + ":" + g.dataset.points)`)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s's resets plot draws %q", node, drawn)
	for _, want := range []string{"probe/baseline:", "probe/soak:", "control/baseline:", "control/soak:", "node/baseline:"} {
		if !slices.ContainsFunc(drawn, func(d string) bool { return strings.HasPrefix(d, want) }) {
			t.Errorf("the resets plot of %s draws no %s series: %q", node, strings.TrimSuffix(want, ":"), drawn)
		}
	}
	if n, err := browser.Eval[int](tctx, `document.querySelectorAll('#plots [data-marker="swap"]').length`); err != nil || n != 3 {
		t.Errorf("%d swap markers (%v), want one per plot", n, err)
	}

	// A one-shot browser has no session: the printed URL's token, on the
	// rollout page's address.
	dom, err := browser.DumpDOM(ctx, base+"/rollouts/rst?"+pu.RawQuery)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dom, `class="halted-node">`+node+`<`) {
		t.Errorf("chromium --dump-dom of the rollout page does not name the halted node %s", node)
	}
}
