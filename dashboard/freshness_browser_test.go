package dashboard

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/nodewise/nodewise/test/browser"
)

// TestBrowserFreshnessPageReadsTheTeamLine: in headless Chromium the list's
// link opens /freshness, where each team's line reads as its lead would
// quote it. It saves the page as the screenshot docs/dashboard.md shows
// (NODEWISE_SCREENSHOTS=$PWD/docs/dashboard).
func TestBrowserFreshnessPageReadsTheTeamLine(t *testing.T) {
	e := freshnessEnv(t, teamsCluster())
	ctx := browser.New(t)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	// The link is clicked by the page's own script: the list re-renders
	// itself once loaded, so a node looked up before it (chromedp.Click)
	// may be gone by the click ("Could not find node with given id").
	link := `a[href="/freshness"]`
	if err := chromedp.Do(ctx, chromedp.Navigate(e.printed), chromedp.WaitVisible(chromedp.CSS(link))); err != nil {
		t.Fatal(err)
	}
	if _, err := browser.Eval[bool](ctx, `(document.querySelector('`+link+`').click(), true)`); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`section[data-team="payments"] .team-line`))); err != nil {
		t.Fatal(err)
	}
	line, err := browser.Text(ctx, `section[data-team="payments"] .team-line`)
	if want := "payments: 3 of 3 pods behind 1.28.1 (up to 1 minor); the oldest pod is 24h old; exposure window 6d"; err != nil || line != want {
		t.Errorf("payments' line reads %q (%v), want %q", line, err, want)
	}
	rows, err := browser.Eval[int](ctx, `document.querySelectorAll('section[data-team="payments"] tbody tr').length`)
	if err != nil || rows != 1 {
		t.Errorf("payments' table has %d rows (%v), want cart's alone", rows, err)
	}
	path, err := browser.Screenshot(ctx, browser.ScreenshotDir(t), "freshness")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}
