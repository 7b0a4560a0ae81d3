// Package docscheck holds the docs to the code: it reads the flags,
// commands, exit codes and CRD fields a Markdown page names and checks each
// against the definitions the binaries and the CRDs carry (the Truth). The
// test that builds the Truth from the real cobra tree, flag sets, exit
// codes and CRDs, and runs it over README.md and docs/*.md, lives in
// cmd/nodewise (docsagree_test.go), beside the CLI's unexported root.
package docscheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// Truth is what the code defines, for Check to hold a page to.
type Truth struct {
	// Programs are our binaries by the name a page calls them by
	// ("nodewise", "orchestrator", "nodeagent", "probe").
	Programs map[string]*Command
	// ExitCodes are the CLI's exit statuses, each with the words only its
	// meaning uses (a phase name, a flag, a command): a page that gives a
	// status for a situation another status names is wrong.
	ExitCodes map[int][]string
	// Kinds are the CRDs' schemas by kind.
	Kinds map[string]*Field
	// Values are the Helm chart's values: a path relative to a CRD object
	// (gates.inconclusive) may be the chart's value of the same name
	// (gates.addressAllow).
	Values *Field
	// Foreign are field paths of objects that are not ours (a Pod's
	// spec.nodeName), and flags of other programs a page may name without
	// naming the program in the same sentence.
	Foreign map[string]bool
}

// Command is one command of a program: its flags (inherited ones
// included) and its subcommands.
type Command struct {
	Path  string
	Flags map[string]Flag // by long name
	Short map[string]bool // shorthands
	Subs  map[string]*Command
}

// Flag is what Check needs to know of a flag: whether it takes a value.
type Flag struct{ Bool bool }

// Field is a node of a CRD's schema.
type Field struct {
	Props map[string]*Field
	Items *Field // a list's element
	Any   *Field // a map's value, or anything under x-kubernetes-preserve-unknown-fields
	Type  string
	Enum  []string
}

// FromCobra walks a cobra tree into Commands; each command carries its own
// and its ancestors' persistent flags, and --help.
func FromCobra(c *cobra.Command) *Command {
	out := &Command{Path: c.CommandPath(), Flags: map[string]Flag{}, Short: map[string]bool{}, Subs: map[string]*Command{}}
	c.InitDefaultHelpFlag()
	add := func(f *pflag.Flag) {
		out.Flags[f.Name] = Flag{Bool: f.NoOptDefVal != ""}
		if f.Shorthand != "" {
			out.Short[f.Shorthand] = true
		}
	}
	c.Flags().VisitAll(add)
	c.InheritedFlags().VisitAll(add)
	for _, sub := range c.Commands() {
		s := FromCobra(sub)
		out.Subs[sub.Name()] = s
		for _, a := range sub.Aliases {
			out.Subs[a] = s
		}
	}
	return out
}

// flagDefiners are the flag.FlagSet methods that define a flag, with the
// index of the name among their arguments.
var flagDefiners = map[string]int{
	"Bool": 0, "BoolVar": 1, "BoolFunc": 0, "Duration": 0, "DurationVar": 1,
	"Float64": 0, "Float64Var": 1, "Func": 0, "Int": 0, "IntVar": 1, "Int64": 0, "Int64Var": 1,
	"String": 0, "StringVar": 1, "TextVar": 1, "Uint": 0, "UintVar": 1, "Uint64": 0, "Uint64Var": 1, "Var": 1,
}

// FromFlagSets reads the flags of program, a binary built on the standard
// flag package, from the calls in its non-test sources in dir (a call
// such as fs.StringVar(&v, "name", ...) whose name is a string literal). It
// fails when it finds none, so a refactor that hides the names from it is
// noticed rather than passing every page.
func FromFlagSets(program, dir string) (*Command, error) {
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	out := &Command{Path: program, Flags: map[string]Flag{"help": {Bool: true}}, Short: map[string]bool{"h": true}}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return nil, err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			i, ok := flagDefiners[sel.Sel.Name]
			if !ok || i >= len(call.Args) {
				return true
			}
			lit, ok := call.Args[i].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			name, err := strconv.Unquote(lit.Value)
			if err == nil && name != "" {
				out.Flags[name] = Flag{Bool: strings.HasPrefix(sel.Sel.Name, "Bool")}
			}
			return true
		})
	}
	if len(out.Flags) == 1 {
		return nil, fmt.Errorf("%s: no flag definitions found", dir)
	}
	return out, nil
}

// FromCRDs reads CRD YAML files into their kinds' schemas (first served
// version of each).
func FromCRDs(paths ...string) (map[string]*Field, error) {
	kinds := map[string]*Field{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(data, &crd); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		for _, v := range crd.Spec.Versions {
			if v.Served && v.Schema != nil && v.Schema.OpenAPIV3Schema != nil {
				kinds[crd.Spec.Names.Kind] = fromSchema(v.Schema.OpenAPIV3Schema)
				break
			}
		}
		if kinds[crd.Spec.Names.Kind] == nil {
			return nil, fmt.Errorf("%s: no served version with a schema", p)
		}
	}
	return kinds, nil
}

// FromValues reads a Helm chart's values.yaml into a tree of its keys.
func FromValues(path string) (*Field, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return fromValue(v), nil
}

func fromValue(v any) *Field {
	switch v := v.(type) {
	case map[string]any:
		f := &Field{Type: "object", Props: map[string]*Field{}}
		for k, e := range v {
			f.Props[k] = fromValue(e)
		}
		if len(v) == 0 {
			f.Any = &Field{} // {}: keys of the user's own
		}
		return f
	case []any:
		f := &Field{Type: "array", Items: &Field{Any: &Field{}}}
		if len(v) > 0 {
			f.Items = fromValue(v[0])
		}
		return f
	}
	return &Field{}
}

func fromSchema(s *apiextensionsv1.JSONSchemaProps) *Field {
	f := &Field{Type: s.Type}
	for _, e := range s.Enum {
		var v any
		if yaml.Unmarshal(e.Raw, &v) == nil {
			f.Enum = append(f.Enum, fmt.Sprint(v))
		}
	}
	if len(s.Properties) > 0 {
		f.Props = map[string]*Field{}
		for name, p := range s.Properties {
			f.Props[name] = fromSchema(&p)
		}
	}
	if s.Items != nil && s.Items.Schema != nil {
		f.Items = fromSchema(s.Items.Schema)
	}
	switch {
	case s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil:
		f.Any = fromSchema(s.AdditionalProperties.Schema)
	case s.XPreserveUnknownFields != nil && *s.XPreserveUnknownFields:
		f.Any = &Field{}
	}
	return f
}

// Phases are the enum values of every kind's status.phase: the words a
// page uses for where a rollout or a migration is.
func Phases(kinds map[string]*Field) []string {
	var out []string
	for _, k := range kinds {
		if p := k.lookup("status", "phase"); p != nil {
			out = append(out, p.Enum...)
		}
	}
	sort.Strings(out)
	return out
}

func (f *Field) lookup(path ...string) *Field {
	if f == nil {
		return nil
	}
	for _, seg := range path {
		if f == nil {
			return nil
		}
		f = f.child(seg)
	}
	return f
}

// child is the field under f named seg; a list steps to its element first.
func (f *Field) child(seg string) *Field {
	if f == nil {
		return nil
	}
	for f.Items != nil {
		f = f.Items
	}
	if c, ok := f.Props[seg]; ok {
		return c
	}
	return f.Any
}

// exitConst is how exitcode.go names a status: exitOK, exitHalted, ...
var exitConst = regexp.MustCompile(`^exit[A-Z]\w*$`)

// ExitCodes reads the exit-status constants of a Go file (const exitX = N
// // meaning) and gives each code the words of vocab its meaning names and
// no other code's does.
func ExitCodes(path string, vocab map[string]bool) (map[int][]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	words := map[int]map[string]bool{}
	owners := map[string]int{}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, s := range gd.Specs {
			vs := s.(*ast.ValueSpec)
			if len(vs.Names) != 1 || len(vs.Values) != 1 || !exitConst.MatchString(vs.Names[0].Name) {
				continue
			}
			lit, ok := vs.Values[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.INT {
				return nil, fmt.Errorf("%s: %s is not an integer literal", path, vs.Names[0].Name)
			}
			code, _ := strconv.Atoi(lit.Value)
			words[code] = map[string]bool{}
			if vs.Comment == nil {
				continue
			}
			for _, w := range regexp.MustCompile(`[-\w]+`).FindAllString(vs.Comment.Text(), -1) {
				w = strings.TrimLeft(w, "-")
				if vocab[w] && !words[code][w] {
					words[code][w] = true
					owners[w]++
				}
			}
		}
	}
	if len(words) == 0 {
		return nil, fmt.Errorf("%s: no exit-status constants", path)
	}
	out := map[int][]string{}
	for code, ws := range words {
		out[code] = []string{}
		for w := range ws {
			if owners[w] == 1 {
				out[code] = append(out[code], w)
			}
		}
		sort.Strings(out[code])
	}
	return out, nil
}
