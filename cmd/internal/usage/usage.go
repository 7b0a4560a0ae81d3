// Package usage prints a daemon's --help: a summary, then every flag with its
// description and default, leaving out the flags only tests use.
package usage

import (
	"flag"
	"fmt"
	"slices"
)

// Set makes fs print summary and its flags, except hidden ones, on -h/--help.
func Set(fs *flag.FlagSet, summary string, hidden ...string) {
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintf(out, "%s\n\nUsage: %s [flags]\n\nFlags:\n", summary, fs.Name())
		shown := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
		shown.SetOutput(out)
		fs.VisitAll(func(f *flag.Flag) {
			if !slices.Contains(hidden, f.Name) {
				shown.Var(f.Value, f.Name, f.Usage)
				shown.Lookup(f.Name).DefValue = f.DefValue // the default, not a value parsed before -h
			}
		})
		shown.PrintDefaults()
	}
}
