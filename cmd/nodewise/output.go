package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"sigs.k8s.io/yaml"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// printFlags is kubectl's -o (json, yaml, name, jsonpath=..., go-template=...)
// for commands that print API objects; no -o (or -o table) keeps the human view.
type printFlags struct {
	pf *genericclioptions.PrintFlags
}

func newPrintFlags(operation string) *printFlags {
	return &printFlags{pf: genericclioptions.NewPrintFlags(operation).WithTypeSetter(v1alpha1.Scheme)}
}

func (p *printFlags) addFlags(cmd *cobra.Command) { p.pf.AddFlags(cmd) }

// human reports whether the human view (table or one line) was asked for.
func (p *printFlags) human() bool {
	f := *p.pf.OutputFormat
	return f == "" || f == "table"
}

// objectPrinter prints API objects in the -o format.
type objectPrinter struct{ p *printFlags }

// toPrinter checks -o before anything is read or written.
func (p *printFlags) toPrinter() (objectPrinter, error) {
	if p.human() {
		return objectPrinter{p}, nil
	}
	if _, err := p.pf.ToPrinter(); err != nil {
		return objectPrinter{}, fmt.Errorf("-o %s: %s", *p.pf.OutputFormat, allowed(p.pf.AllowedFormats()))
	}
	return objectPrinter{p}, nil
}

// print writes obj; operation ("created", "paused" ...) is what the human
// view and -o name say happened.
func (o objectPrinter) print(w io.Writer, obj runtime.Object, operation string) error {
	o.p.pf.NamePrintFlags.Operation = operation
	format := *o.p.pf.OutputFormat
	if format == "table" {
		*o.p.pf.OutputFormat = ""
		defer func() { *o.p.pf.OutputFormat = format }()
	}
	printer, err := o.p.pf.ToPrinter()
	if err != nil {
		return err
	}
	return printer.PrintObj(obj, w)
}

func allowed(formats []string) string {
	return "want table, " + strings.Join(formats, ", ")
}

// printData writes a value that is not an API object (an inventory, a tag
// list) as JSON or YAML; human is the table.
func printData(w io.Writer, format string, v any, human func() error) error {
	switch format {
	case "", "table":
		return human()
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = w.Write(append(b, '\n'))
		return err
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	return fmt.Errorf("-o %s: want table, json or yaml", format)
}

// checkDataFormat refuses an unknown -o before anything is read.
func checkDataFormat(format string) error {
	switch format {
	case "", "table", "json", "yaml":
		return nil
	}
	return fmt.Errorf("-o %s: want table, json or yaml", format)
}
