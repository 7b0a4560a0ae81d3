package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/util/jsonpath"
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

// dataOutput is -o for what is not an API object (an inventory, a skew
// report, a plan): json, yaml, name (one name a line) or jsonpath=TEMPLATE
// (kubectl's JSONPath, missing keys allowed as kubectl allows them by
// default); table, or no -o, is the human view.
type dataOutput struct{ format string }

const dataFormats = "want table, json, yaml, name or jsonpath=TEMPLATE"

func (o *dataOutput) addFlag(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.format, "output", "o", "", "output format: table (default), json, yaml, name or jsonpath=TEMPLATE")
}

// check refuses an unknown -o (or a JSONPath that does not parse) before
// anything is read.
func (o dataOutput) check() error {
	_, err := o.jsonPath()
	return err
}

func (o dataOutput) human() bool { return o.format == "" || o.format == "table" }

func (o dataOutput) jsonPath() (*jsonpath.JSONPath, error) {
	switch o.format {
	case "", "table", "json", "yaml", "name":
		return nil, nil
	}
	tmpl, ok := strings.CutPrefix(o.format, "jsonpath=")
	if !ok || tmpl == "" {
		return nil, fmt.Errorf("-o %s: %s", o.format, dataFormats)
	}
	jp := jsonpath.New("output").AllowMissingKeys(true)
	if err := jp.Parse(tmpl); err != nil {
		return nil, fmt.Errorf("-o %s: %w", o.format, err)
	}
	return jp, nil
}

// print writes v in the -o format; names are what -o name prints, human the
// table.
func (o dataOutput) print(w io.Writer, v any, names func() []string, human func() error) error {
	switch o.format {
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
	case "name":
		for _, n := range names() {
			if _, err := fmt.Fprintln(w, n); err != nil {
				return err
			}
		}
		return nil
	}
	jp, err := o.jsonPath()
	if err != nil {
		return err
	}
	// JSONPath walks the value as its JSON reads, field names included.
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		return err
	}
	return jp.Execute(w, doc)
}
