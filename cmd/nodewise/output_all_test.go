package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// notPrinting are the commands that print no result a script could parse,
// each with why; every other command must take -o.
var notPrinting = map[string]string{
	"nodewise sim":        "runs and stops the local simulated cluster's processes",
	"nodewise dashboard":  "serves a web page",
	"nodewise demo":       "a narrated walkthrough for people",
	"nodewise completion": "prints a shell script",
	"nodewise help":       "cobra's help",
}

// leaves is every runnable command of the tree, by path.
func leaves(c *cobra.Command) []*cobra.Command {
	var out []*cobra.Command
	if c.Runnable() {
		out = append(out, c)
	}
	for _, s := range c.Commands() {
		out = append(out, leaves(s)...)
	}
	return out
}

// TestEveryPrintingCommandTakesOutput walks the command tree: a command that
// prints must take -o and accept yaml and jsonpath=TEMPLATE (refusing a
// format it does not know, before it reads the cluster). A new printing
// command without -o fails here until it gets one or is listed, with a
// reason, in notPrinting.
func TestEveryPrintingCommandTakesOutput(t *testing.T) {
	root := newRootCmd("nodewise")
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	seen := map[string]bool{}
	for _, c := range leaves(root) {
		path := c.CommandPath()
		seen[path] = true
		if exempt(c) {
			continue
		}
		if f := c.Flags().Lookup("output"); f == nil || f.Shorthand != "o" {
			t.Errorf("%s prints but takes no -o/--output", path)
			continue
		}
		for _, format := range []string{"yaml", "jsonpath={.metadata.name}", "jsonpath={.a}"} {
			if msg := runOffline(c, format); strings.Contains(msg, "-o "+format) {
				t.Errorf("%s -o %s refused: %s", path, format, msg)
			}
		}
		if msg := runOffline(c, "bogus"); !strings.Contains(msg, "-o bogus") {
			t.Errorf("%s -o bogus: %q, want it refused as an output format", path, msg)
		}
	}
	for path := range notPrinting {
		if !seen[path] && !hasChildren(root, path) {
			t.Errorf("notPrinting lists %s, which is no command", path)
		}
	}
}

// exempt: c or a command above it is listed in notPrinting.
func exempt(c *cobra.Command) bool {
	for p := c; p != nil; p = p.Parent() {
		if _, ok := notPrinting[p.CommandPath()]; ok {
			return true
		}
	}
	return false
}

func hasChildren(root *cobra.Command, path string) bool {
	c, _, err := root.Find(strings.Fields(path)[1:])
	return err == nil && c.CommandPath() == path && c.HasSubCommands()
}

// runOffline runs c with -o format against an address nothing listens on,
// with placeholder arguments for its usage's NAME-like words, and returns
// its error text.
func runOffline(c *cobra.Command, format string) string {
	root := newRootCmd("nodewise")
	args := strings.Fields(c.CommandPath())[1:]
	for _, w := range strings.Fields(c.Use)[1:] {
		if strings.HasPrefix(w, "-") || strings.HasPrefix(w, "[") {
			break // flags and optional arguments follow
		}
		args = append(args, "x")
	}
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if _, required := f.Annotations[cobra.BashCompOneRequiredFlag]; required {
			args = append(args, "--"+f.Name+"=x")
		}
	})
	args = append(args, "-o", format, "--server=https://127.0.0.1:1", "--request-timeout=1s", "--kubeconfig=/dev/null")
	root.SetArgs(args)
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ""
	}
	return err.Error()
}
