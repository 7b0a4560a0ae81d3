package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/nodewise/nodewise/test/docscheck"
)

// foreign are the names pages give that are other objects' or programs',
// in sentences that do not say whose.
var foreign = map[string]bool{
	"spec.nodeName":          true, // a Pod's: the node it runs on (and the field selector on it)
	"spec.unschedulable":     true, // a Node's: cordoned
	"spec.template":          true, // a workload's pod template, whose annotation a restart sets
	"status.hostIPs":         true, // a Pod's, read through the downward API
	"prometheus.monitoring":  true, // a Service's short host name, not a path
	"spec.ignoreDifferences": true, // an Argo CD Application's
	"spec.driftIgnoreRules":  true, // a Flux Kustomization's
	"spec.driftDetection":    true, // a Flux HelmRelease's
	"--set":                  true, // helm's, setting a chart value
	"--field-selector":       true, // kubectl's
}

// TestDocsAgreeWithTheCode holds README.md and docs/*.md to the code: every
// nodewise command and flag they name is in the cobra tree newRootCmd
// builds, every orchestrator, nodeagent and probe flag in their flag sets,
// every spec./status. field (and field: value) in the CRDs under
// deploy/crds, and every exit status they give is exitcode.go's, for the
// situation it means. docs/bench-log.md is left out: it records past runs as
// they were run.
func TestDocsAgreeWithTheCode(t *testing.T) {
	root := filepath.Join("..", "..")
	kinds, err := docscheck.FromCRDs(
		filepath.Join(root, "deploy", "crds", "nodewise.io_noderollouts.yaml"),
		filepath.Join(root, "deploy", "crds", "nodewise.io_revisionmigrations.yaml"),
		filepath.Join(root, "deploy", "crds", "nodewise.io_podagepolicies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	values, err := docscheck.FromValues(filepath.Join(root, "deploy", "charts", "nodewise", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cli := newRootCmd("nodewise")
	cli.InitDefaultHelpCmd()
	cli.InitDefaultCompletionCmd()
	programs := map[string]*docscheck.Command{"nodewise": docscheck.FromCobra(cli)}
	for _, p := range []string{"orchestrator", "nodeagent", "probe"} {
		if programs[p], err = docscheck.FromFlagSets(p, filepath.Join(root, "cmd", p)); err != nil {
			t.Fatal(err)
		}
	}
	// The words an exit status's meaning may be told by: phases, commands, flags.
	vocab := map[string]bool{}
	for _, p := range docscheck.Phases(kinds) {
		vocab[p] = true
	}
	var words func(c *cobra.Command)
	words = func(c *cobra.Command) {
		vocab[c.Name()] = true
		c.Flags().VisitAll(func(f *pflag.Flag) { vocab[f.Name] = true })
		for _, s := range c.Commands() {
			words(s)
		}
	}
	words(cli)
	codes, err := docscheck.ExitCodes("exitcode.go", vocab)
	if err != nil {
		t.Fatal(err)
	}
	truth := docscheck.Truth{Programs: programs, ExitCodes: codes, Kinds: kinds, Values: values, Foreign: foreign}

	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range append(pages, filepath.Join(root, "README.md")) {
		name, _ := filepath.Rel(root, page)
		if name == filepath.Join("docs", "bench-log.md") {
			continue
		}
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range docscheck.Check(name, string(text), truth) {
			t.Error(f)
		}
	}
}
