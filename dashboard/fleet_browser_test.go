package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/planner"
	"github.com/nodewise/nodewise/test/browser"
)

// cellJS is the script expression of node's cell on the map.
func cellJS(rollout, node string) string {
	return `document.querySelector('#map a[href="` + rollout + `/nodes/` + node + `"]')`
}

// TestBrowserFleetMapOf5000Nodes: in headless Chromium, the page of a
// 5,000-node status-only rollout draws a cell for every node in four
// blocks (the canary, three zones) and lists 100; keyboard focus on a cell
// names the node and its state; one change of two nodes restyles their
// cells, and the listed one's row, in place: the same document, no fetch
// of the page, every other cell as it was.
func TestBrowserFleetMapOf5000Nodes(t *testing.T) {
	nr := fleetRollout("fleet", 5000)
	e := newEnv(t, false, nr)
	ctx := browser.New(t) // closed before the server, whose Close waits for the page's event stream
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(e.printed)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(e.srv.URL+"/rollouts/fleet"), chromedp.WaitVisible(chromedp.CSS("#map"))); err != nil {
		t.Fatal(err)
	}
	if err := browser.WaitTrue(ctx, `document.getElementById("live").textContent === "live"`); err != nil {
		t.Fatal(err)
	}
	const counts = `[document.querySelectorAll("#map a").length, document.querySelectorAll("#map .zone").length, document.querySelectorAll("#nodes tr[id]").length,
		document.querySelectorAll("#map a.busy").length, document.querySelectorAll("#map a.bad").length]`
	if got, err := browser.Eval[[]int](ctx, counts); err != nil || !slices.Equal(got, []int{5000, 4, 100, 12, 0}) {
		t.Fatalf("cells, blocks, rows listed, cells in flight and failed: %v (%v); want 5000, 4, 100, 12, 0", got, err)
	}

	deep, listed := &nr.Status.Nodes[3000], &nr.Status.Nodes[40] // pending on page 31; done on page 1
	if _, err := chromedp.Call(ctx, emulation.SetFocusEmulationEnabled, emulation.SetFocusEmulationEnabledParams{Enabled: true}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Focus(`#map a[href="fleet/nodes/`+deep.Name+`"]`)); err != nil {
		t.Fatal(err)
	}
	want := strconv.Quote(deep.Name + ": Pending, wave " + strconv.Itoa(int(deep.Wave)))
	if shown, err := browser.Eval[string](ctx, `getComputedStyle(document.activeElement, "::after").content`); err != nil || shown != want {
		t.Errorf("the focused cell shows %s (%v), want %s", shown, err, want)
	}

	if _, err := browser.Eval[bool](ctx, `window.__sameDocument = true`); err != nil {
		t.Fatal(err)
	}
	deep.State, listed.State = v1alpha1.NodeSoak, v1alpha1.NodeFailed
	nr.Status.Counts = planner.Counts(nr.Status.Nodes)
	e.rs.put(nr)
	if err := browser.WaitTrue(ctx, cellJS("fleet", deep.Name)+`.className === "busy" && `+cellJS("fleet", listed.Name)+`.className === "bad"`); err != nil {
		t.Fatalf("the cells never changed: %v", err)
	}
	if err := browser.WaitTrue(ctx, `document.querySelector("#node-`+listed.Name+` td.state").textContent.includes("Failed")`); err != nil {
		t.Fatalf("%s's row never showed Failed: %v", listed.Name, err)
	}
	if got, err := browser.Eval[[]int](ctx, counts); err != nil || !slices.Equal(got, []int{5000, 4, 100, 13, 1}) {
		t.Errorf("after the change: %v (%v); want 5000, 4, 100, 13, 1", got, err)
	}
	if label, _ := browser.Eval[string](ctx, cellJS("fleet", deep.Name)+`.getAttribute("aria-label")`); !strings.HasPrefix(label, deep.Name+": Soak,") {
		t.Errorf("%s's cell reads %q", deep.Name, label)
	}
	if same, err := browser.Eval[bool](ctx, `window.__sameDocument === true && document.activeElement === `+cellJS("fleet", deep.Name)); err != nil || !same {
		t.Errorf("the page reloaded, or its cell lost focus, to show the change (%v)", err)
	}
	if fetches, err := browser.Eval[int](ctx, `performance.getEntriesByType("resource").filter(r => r.initiatorType === "fetch").length`); err != nil || fetches != 0 {
		t.Errorf("the page fetched itself %d times (%v), want none: the stream carries the change", fetches, err)
	}
	// The screenshot docs/dashboard.md shows: the page's top, the failed
	// cell focused.
	if err := chromedp.Do(ctx, chromedp.Focus(`#map a[href="fleet/nodes/`+listed.Name+`"]`)); err != nil {
		t.Fatal(err)
	}
	if _, err := browser.Eval[bool](ctx, `window.scrollTo(0, 0), true`); err != nil {
		t.Fatal(err)
	}
	shot, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(browser.ScreenshotDir(t), "rollout-map.png")
	if err := os.WriteFile(p, shot, 0o644); err != nil {
		t.Error(err)
	}
	t.Logf("screenshot: %s", p)
}

// TestBrowserRolloutPageOpenBeforeItsRollout: a rollout's page opened
// before the rollout exists says so, fills in from the change events once
// it is created (one fetch of its <main>), and from then on follows the
// rollout on a stream of its own: a node's change restyles its cell without
// another fetch.
func TestBrowserRolloutPageOpenBeforeItsRollout(t *testing.T) {
	e := newEnv(t, false)
	ctx := browser.New(t) // closed before the server, whose Close waits for the page's event stream
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(e.printed)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(e.srv.URL+"/rollouts/late"), chromedp.WaitVisible(chromedp.CSS("#live"))); err != nil {
		t.Fatal(err)
	}
	if err := browser.WaitTrue(ctx, `document.getElementById("live").textContent === "live" && document.body.textContent.includes("does not exist")`); err != nil {
		t.Fatal(err)
	}
	const fetches = `performance.getEntriesByType("resource").filter(r => r.initiatorType === "fetch").length`
	if err := browser.WaitTrue(ctx, fetches+` === 1`); err != nil { // the change stream's open fetches <main> once
		t.Fatal(err)
	}
	nr := fleetRollout("late", 60)
	e.rs.put(nr)
	if err := browser.WaitTrue(ctx, `document.querySelectorAll("#map a").length === 60 && document.querySelector("[data-stream]") !== null`); err != nil {
		t.Fatalf("the page never showed the rollout: %v", err)
	}
	n := &nr.Status.Nodes[50]
	n.State = v1alpha1.NodeSoak
	e.rs.put(nr)
	if err := browser.WaitTrue(ctx, cellJS("late", n.Name)+`.className === "busy"`); err != nil {
		t.Fatalf("%s's cell never showed it in flight: %v", n.Name, err)
	}
	if got, err := browser.Eval[int](ctx, fetches); err != nil || got != 2 {
		t.Errorf("%d fetches of the page after its rollout was created (%v), want 1: the one that showed it", got-1, err)
	}
}

// countStreams counts the bytes the server writes to event streams.
type countStreams struct {
	h http.Handler
	n atomic.Int64
}

func (c *countStreams) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/events" {
		w = &countingWriter{w, &c.n}
	}
	c.h.ServeHTTP(w, r)
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w *countingWriter) Write(b []byte) (int, error) {
	w.n.Add(int64(len(b)))
	return w.ResponseWriter.Write(b)
}

func (w *countingWriter) Flush() { w.ResponseWriter.(http.Flusher).Flush() }

// BenchmarkRolloutPage: the page of a 1,000- and a 5,000-node status-only
// rollout in headless Chromium, loaded -benchtime times: the browser's own timing
// of each load (Navigation Timing: DOMContentLoaded and the load event's
// end, from the navigation's start; Paint Timing: the first contentful
// paint), the page's bytes, and what one node's change of state sends to
// the open tab (the bytes its event stream carries, counted on the server,
// a different pending node going in flight each load). Prints one
// `dashboard nodes=… load_ms=… …` line a size, the medians and the largest
// update.
func BenchmarkRolloutPage(b *testing.B) {
	for _, nodes := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) { benchRolloutPage(b, nodes) })
	}
}

func benchRolloutPage(b *testing.B, nodes int) {
	nr := fleetRollout("fleet", nodes)
	rs := newFakeRollouts(nr)
	s := started(b, Config{Rollouts: rs, Token: testToken(b), Now: func() time.Time { return t0.Add(5 * time.Minute) }})
	counted := &countStreams{h: s.Handler()}
	srv := httptest.NewServer(counted)
	b.Cleanup(srv.Close)
	ctx := browser.New(b) // closed before the server, whose Close waits for the page's event stream
	if err := chromedp.Do(ctx, chromedp.Navigate(s.URL(strings.TrimPrefix(srv.URL, "http://")))); err != nil {
		b.Fatal(err)
	}
	const timing = `(() => {
		const n = performance.getEntriesByType("navigation")[0], p = performance.getEntriesByName("first-contentful-paint")[0];
		return n && n.loadEventEnd > 0 && p ? [n.loadEventEnd, n.domContentLoadedEventEnd, p.startTime, n.decodedBodySize, n.transferSize] : null;
	})()`
	var loads, dcls, fcps []float64
	var page, wire float64
	var update int64
	for i := 0; b.Loop(); i++ {
		if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/rollouts/fleet")); err != nil {
			b.Fatal(err)
		}
		t, err := chromedp.Run(ctx, chromedp.Poll[[]float64](timing))
		if err != nil {
			b.Fatal(err)
		}
		loads, dcls, fcps, page, wire = append(loads, t[0]), append(dcls, t[1]), append(fcps, t[2]), t[3], t[4]
		if err := browser.WaitTrue(ctx, `document.getElementById("live").textContent === "live"`); err != nil {
			b.Fatal(err)
		}
		n := &nr.Status.Nodes[len(nr.Status.Nodes)-1-i] // pending, not on the list's first page
		n.State = v1alpha1.NodeSoak
		nr.Status.Counts = planner.Counts(nr.Status.Nodes)
		before := counted.n.Load()
		rs.put(nr)
		if err := browser.WaitTrue(ctx, cellJS("fleet", n.Name)+`.className === "busy"`); err != nil {
			b.Fatal(err)
		}
		update = max(update, counted.n.Load()-before)
	}
	if cells, err := browser.Eval[int](ctx, `document.querySelectorAll("#map a").length`); err != nil || cells != nodes {
		b.Fatalf("the map has %d cells (%v), want %d", cells, err, nodes)
	}
	median := func(v []float64) float64 { slices.Sort(v); return v[len(v)/2] }
	b.ReportMetric(median(loads), "load-ms")
	b.ReportMetric(float64(update), "update-bytes")
	fmt.Printf("dashboard nodes=%d load_ms=%.0f dcl_ms=%.0f fcp_ms=%.0f page_bytes=%.0f wire_bytes=%.0f update_bytes=%d loads=%d best_load_ms=%.0f worst_load_ms=%.0f\n",
		nodes, median(loads), median(dcls), median(fcps), page, wire, update, len(loads), loads[0], loads[len(loads)-1])
}
