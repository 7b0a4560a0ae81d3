// Package browser starts headless Chromium (Debian's chromium package) for
// tests and drives it with chromedp: the dashboard's pages are asserted on
// as a browser renders them. Each browser gets a fresh profile and no
// network of its own beyond what the page asks for.
package browser

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Flags are the Chromium flags every run uses: headless, no sandbox (tests
// run as root), no GPU, and nothing that reaches out to the network.
var Flags = []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
	"--disable-background-networking", "--disable-component-update", "--disable-sync"}

// Path is the Chromium binary: $NODEWISE_CHROMIUM, else chromium on PATH.
func Path() (string, error) {
	if p := os.Getenv("NODEWISE_CHROMIUM"); p != "" {
		return p, nil
	}
	p, err := exec.LookPath("chromium")
	if err != nil {
		return "", fmt.Errorf("headless Chromium is needed for the browser tests: apt-get install chromium (make deps does), or set NODEWISE_CHROMIUM")
	}
	return p, nil
}

// New starts a browser for t and returns its tab's context; t's end closes it.
func New(t testing.TB) context.Context {
	t.Helper()
	path, err := Path()
	if err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{chromedp.ExecPath(path), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900)}
	for _, f := range Flags {
		opts = append(opts, chromedp.Flag(f[2:], true))
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		cancel()
		cancelA()
		t.Fatalf("starting %s: %v", path, err)
	}
	t.Cleanup(func() { cancel(); cancelA() })
	return ctx
}

// DumpDOM runs Chromium once with --dump-dom on url and returns the DOM it
// printed, as a person checking the page from a shell would.
func DumpDOM(ctx context.Context, url string) (string, error) {
	path, err := Path()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "nodewise-chromium-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	args := append(append([]string{}, Flags...), "--user-data-dir="+dir, "--dump-dom", url)
	out, err := exec.CommandContext(ctx, path, args...).Output()
	if err != nil {
		return "", fmt.Errorf("chromium --dump-dom %s: %w", url, err)
	}
	return string(out), nil
}

// Screenshot saves the tab's full page as dir/name.png and returns the path.
func Screenshot(ctx context.Context, dir, name string) (string, error) {
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		return "", fmt.Errorf("screenshot %s: %w", name, err)
	}
	path := filepath.Join(dir, name+".png")
	return path, os.WriteFile(path, png, 0o644)
}

// ScreenshotDir is $NODEWISE_SCREENSHOTS (docs/dashboard takes the ones
// the docs show), else a directory of t's.
func ScreenshotDir(t testing.TB) string {
	if d := os.Getenv("NODEWISE_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// Text is the rendered text of the first element matching css.
func Text(ctx context.Context, css string) (string, error) {
	return chromedp.Run(ctx, chromedp.Text(chromedp.CSS(css)))
}

// Eval evaluates a JavaScript expression in the page.
func Eval[T any](ctx context.Context, js string) (T, error) {
	return chromedp.Run(ctx, chromedp.Evaluate[T](js))
}

// WaitTrue waits until a JavaScript expression is true in the page (or
// ctx ends), and says which expression did not come true.
func WaitTrue(ctx context.Context, js string) error {
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](js)); err != nil {
		return fmt.Errorf("waiting for %s: %w", js, err)
	}
	return nil
}
