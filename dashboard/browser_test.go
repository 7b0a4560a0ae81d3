package dashboard

import (
	"context"
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
