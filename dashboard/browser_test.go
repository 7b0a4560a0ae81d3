package dashboard

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/test/browser"
)

// TestBrowserRendersAndUpdatesLive: in headless Chromium the rollout page
// shows the halt and its node, and a node's state changes on the page when
// the watch says so, without a reload; the confirm dialog guards an action
// and a refused patch reads "forbidden".
func TestBrowserRendersAndUpdatesLive(t *testing.T) {
	e := newEnv(t, false, haltedRollout("faulty", 9))
	ctx := browser.New(t) // closed before the server, whose Close waits for the page's event stream
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(e.printed)); err != nil { // as a person opens the printed URL
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(e.srv.URL+"/rollouts/faulty"), chromedp.WaitVisible(chromedp.CSS("#halt"))); err != nil {
		t.Fatal(err)
	}
	if err := browser.WaitTrue(ctx, `document.getElementById("live").textContent === "live"`); err != nil {
		t.Fatal(err)
	}
	halt, err := browser.Text(ctx, "#halt h2")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(halt, "node-001") {
		t.Errorf("halt banner %q does not name node-001", halt)
	}
	if _, err := browser.Eval[bool](ctx, `window.__sameDocument = true`); err != nil {
		t.Fatal(err)
	}
	nr := haltedRollout("faulty", 9)
	nr.Status.Nodes[1].State = v1alpha1.NodeSoak
	e.rs.put(nr)
	if err := browser.WaitTrue(ctx, `document.querySelector("#node-node-002 td.state").textContent.includes("Soak")`); err != nil {
		t.Fatalf("node-002 never showed Soak on the page: %v", err)
	}
	if same, err := browser.Eval[bool](ctx, `window.__sameDocument === true`); err != nil || !same {
		t.Errorf("the page reloaded to show the change (%v)", err)
	}
	// The halted node's page: its pods' connection ages before → after.
	if err := chromedp.Do(ctx, chromedp.Navigate(e.srv.URL+"/rollouts/faulty/nodes/node-001"), chromedp.WaitVisible(chromedp.CSS("td.ages"))); err != nil {
		t.Fatal(err)
	}
	if ages, err := browser.Text(ctx, `tr[data-pod="default/web-1"] td.ages`); err != nil || ages != "40 open, median ≥45 s, oldest ≥600 s → 2 open, median <1 s, oldest ≥1 s" {
		t.Errorf("default/web-1's connection ages read %q (%v)", ages, err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(e.srv.URL+"/rollouts/faulty"), chromedp.WaitVisible(chromedp.CSS("#halt"))); err != nil {
		t.Fatal(err)
	}
	if err := browser.WaitTrue(ctx, `document.getElementById("live").textContent === "live"`); err != nil {
		t.Fatal(err)
	}
	e.rs.patchErr = forbidden()
	if err := confirmAction(ctx, "pause"); err != nil {
		t.Fatal(err)
	}
	if err := browser.WaitTrue(ctx, `document.getElementById("action-result").className === "forbidden"`); err != nil {
		t.Fatal(err)
	}
	if result, _ := browser.Text(ctx, "#action-result"); !strings.HasPrefix(result, "forbidden:") {
		t.Errorf("a refused pause reads %q", result)
	}
	if p, err := browser.Screenshot(ctx, browser.ScreenshotDir(t), "dashboard-forbidden"); err != nil {
		t.Error(err)
	} else {
		t.Logf("screenshot: %s", p)
	}
}

// TestBrowserOpensThePrintedURL: in headless Chromium, a page opened without
// the session is refused and says where the URL was printed; the printed
// URL lands on the list with the token gone from the address bar and out of
// the page's reach (HttpOnly); the page's own pause then goes through.
func TestBrowserOpensThePrintedURL(t *testing.T) {
	e := newEnv(t, false, haltedRollout("faulty", 3))
	ctx := browser.New(t) // closed before the server, whose Close waits for the page's event stream
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(e.srv.URL+"/rollouts/faulty")); err != nil {
		t.Fatal(err)
	}
	if body, err := browser.Text(ctx, "body"); err != nil || !strings.Contains(body, "printed") || strings.Contains(body, "node-001") {
		t.Errorf("the rollout page without the session reads %q (%v); want the refusal saying where the URL was printed", body, err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(e.printed), chromedp.WaitVisible(chromedp.CSS(`a[href="/rollouts/faulty"]`))); err != nil {
		t.Fatal(err)
	}
	if href, err := browser.Eval[string](ctx, `location.href`); err != nil || href != e.srv.URL+"/" {
		t.Errorf("the printed URL lands on %q (%v), want %s/ without the token", href, err, e.srv.URL)
	}
	if cookie, err := browser.Eval[string](ctx, `document.cookie`); err != nil || cookie != "" {
		t.Errorf("the page's script reads the cookie %q (%v); want it HttpOnly", cookie, err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(e.srv.URL+"/rollouts/faulty"), chromedp.WaitVisible(chromedp.CSS("#halt"))); err != nil {
		t.Fatal(err)
	}
	if err := browser.WaitTrue(ctx, `document.getElementById("live").textContent === "live"`); err != nil {
		t.Fatal(err)
	}
	if err := confirmAction(ctx, "pause"); err != nil {
		t.Fatal(err)
	}
	if err := browser.WaitTrue(ctx, `document.getElementById("action-result").className !== ""`); err != nil {
		t.Fatal(err)
	}
	if result, _ := browser.Text(ctx, "#action-result"); result != "NodeRollout faulty paused" {
		t.Errorf("the page's pause reads %q", result)
	}
	e.rs.mu.Lock()
	defer e.rs.mu.Unlock()
	if len(e.rs.patches) != 1 || e.rs.patches[0] != `faulty {"spec":{"paused":true}}` {
		t.Errorf("patches: %q", e.rs.patches)
	}
}

// confirmAction clicks an action's button on the rollout page and confirms
// it in the dialog, as a person does.
func confirmAction(ctx context.Context, verb string) error {
	return chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`button[data-action="`+verb+`"]`)),
		chromedp.WaitVisible(chromedp.CSS("#confirm")),
		chromedp.Click(chromedp.CSS("#confirm-ok")),
	)
}

// TestBrowserPlotsTheHaltedNode: in headless Chromium the halted node's
// page plots, for each judged family, the node, its control nodes and the
// probe over the baseline and the soak, the swap marker standing where the
// baseline ends; on the resets plot the node's soak is drawn above its
// baseline and the controls' is not. It saves the plots as the screenshot
// docs/dashboard.md shows (NODEWISE_SCREENSHOTS=$PWD/docs/dashboard from the repository root).
func TestBrowserPlotsTheHaltedNode(t *testing.T) {
	e := newEnvWith(t, func(c *Config) { c.History = haltedHistory() }, haltedRollout("faulty", 9))
	ctx := browser.New(t) // closed before the server, whose Close waits for the page's event stream
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(e.printed), chromedp.Navigate(e.srv.URL+"/rollouts/faulty/nodes/node-001"),
		chromedp.WaitVisible(chromedp.CSS(`#plots svg[data-plot="resets"]`))); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"resets", "failed-connects", "connect-latency"} {
		for _, kind := range []string{seriesNode, seriesControl, seriesProbe} {
			for _, w := range []string{windowBaseline, windowSoak} {
				sel := `#plots svg[data-plot="` + id + `"] g[data-series="` + kind + `"][data-window="` + w + `"] polyline`
				if n, err := browser.Eval[int](ctx, `document.querySelector('`+sel+`').points.numberOfItems`); err != nil || n != 12 {
					t.Errorf("%s: %d points (%v), want 12", sel, n, err)
				}
			}
		}
	}
	// Where the browser drew them: the swap marker at the baseline band's
	// right edge; the node's soak above its baseline (SVG's y runs down),
	// the controls' level.
	meanY := func(kind, window string) float64 {
		t.Helper()
		y, err := browser.Eval[float64](ctx, `(() => { const ps = [...document.querySelector('#plots svg[data-plot="resets"] g[data-series="`+kind+`"][data-window="`+window+`"] polyline').points];
			return ps.reduce((s, p) => s + p.y, 0) / ps.length; })()`)
		if err != nil {
			t.Fatal(err)
		}
		return y
	}
	if b, s := meanY(seriesNode, windowBaseline), meanY(seriesNode, windowSoak); s > b-50 {
		t.Errorf("the node's resets drawn at y=%.1f over the baseline, %.1f over the soak: want the soak well above", b, s)
	}
	if b, s := meanY(seriesControl, windowBaseline), meanY(seriesControl, windowSoak); b != s {
		t.Errorf("the controls' resets drawn at y=%.1f, then %.1f: want them level", b, s)
	}
	swap, err := browser.Eval[[]float64](ctx, `(() => { const svg = document.querySelector('#plots svg[data-plot="resets"]');
		const m = svg.querySelector('[data-marker="swap"]'), b = svg.querySelector('[data-band="baseline"]');
		return [m.x1.baseVal.value, b.x.baseVal.value + b.width.baseVal.value, m.getBoundingClientRect().height]; })()`)
	if err != nil || len(swap) != 3 || math.Abs(swap[0]-swap[1]) > 0.01 || swap[2] < 100 {
		t.Errorf("swap marker at x, baseline's end, marker's drawn height: %v (%v)", swap, err)
	}
	if at, err := browser.Eval[string](ctx, `document.querySelector('#plots svg[data-plot="resets"] [data-marker="swap"]').dataset.at`); err != nil || at != "2026-12-03T03:01:00Z" {
		t.Errorf("swap marker at %q (%v)", at, err)
	}
	// Read without colour: a name and words for each plot, a direct label per series.
	label, err := browser.Eval[string](ctx, `(() => { const svg = document.querySelector('#plots svg[data-plot="resets"]');
		return svg.getAttribute("aria-labelledby").split(" ").map((id) => document.getElementById(id).textContent).join(" | ") + " | " +
			[...svg.querySelectorAll("text.direct-label")].map((t) => t.textContent).sort().join(", "); })()`)
	if err != nil || !strings.Contains(label, "Connection resets, sent and received (resets/s) | ") || !strings.Contains(label, "node-001 0.2 resets/s → 4 resets/s") ||
		!strings.HasSuffix(label, " | controls, node-001, probe") {
		t.Errorf("the resets plot reads %q (%v)", label, err)
	}
	png, err := chromedp.Run(ctx, chromedp.Screenshot(chromedp.CSS("#plots")))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(browser.ScreenshotDir(t), "node-plots.png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d KiB)", path, len(png)/1024)
}
