package main

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/revisions/revtag"
)

func newTagCmd(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tag",
		Short: "List, set and remove Istio revision tags (compatible with istioctl tag)",
	}
	cmd.AddCommand(newTagListCmd(g), newTagSetCmd(g), newTagRemoveCmd(g))
	return cmd
}

func newTagListCmd(g *globalFlags) *cobra.Command {
	var f sidecarFlags
	var output dataOutput
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List revision tags, the revision each points at, and the namespaces using it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.check(); err != nil {
				return err
			}
			client, err := g.kube()
			if err != nil {
				return err
			}
			tags, err := revtag.List(cmd.Context(), client, f.istioNamespace)
			if err != nil {
				return err
			}
			return output.print(cmd.OutOrStdout(), tags, func() []string {
				var n []string
				for _, t := range tags {
					n = append(n, t.Name)
				}
				return n
			}, func() error {
				w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 8, 2, ' ', 0)
				fmt.Fprintln(w, "TAG\tREVISION\tNAMESPACES")
				for _, t := range tags {
					fmt.Fprintf(w, "%s\t%s\t%s\n", t.Name, t.Revision, strings.Join(t.Namespaces, ","))
				}
				return w.Flush()
			})
		},
	}
	f.bind(cmd)
	output.addFlag(cmd)
	return cmd
}

func newTagSetCmd(g *globalFlags) *cobra.Command {
	var f sidecarFlags
	var o revtag.SetOptions
	var output dataOutput
	cmd := &cobra.Command{
		Use:   "set TAG --revision REV [--overwrite]",
		Short: "Create the tag istio-revision-tag-TAG pointing at REV, or move it with --overwrite",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.check(); err != nil {
				return err
			}
			o.Tag, o.IstioNamespace = args[0], f.istioNamespace
			if o.Revision == "" {
				return errors.New("--revision is required")
			}
			client, err := g.kube()
			if err != nil {
				return err
			}
			if err := revtag.Set(cmd.Context(), client, o); err != nil {
				return err
			}
			return printTag(cmd, client, output, o.Tag, f.istioNamespace, func() error {
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "tag %s now points at revision %s; restart workloads in namespaces labelled istio.io/rev=%s to move their proxies\n", o.Tag, o.Revision, o.Tag)
				return err
			})
		},
	}
	f.bind(cmd)
	output.addFlag(cmd)
	cmd.Flags().StringVar(&o.Revision, "revision", "", "revision the tag points at (required)")
	cmd.Flags().BoolVar(&o.Overwrite, "overwrite", false, "move the tag if it already exists")
	return cmd
}

func newTagRemoveCmd(g *globalFlags) *cobra.Command {
	var f sidecarFlags
	var output dataOutput
	cmd := &cobra.Command{
		Use:   "remove TAG",
		Short: "Remove a revision tag no namespace uses",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := output.check(); err != nil {
				return err
			}
			client, err := g.kube()
			if err != nil {
				return err
			}
			// Read first: -o prints the tag as it was (the revision it pointed at).
			rev, err := revtag.Get(cmd.Context(), client, args[0])
			if err != nil {
				return err
			}
			if err := revtag.Remove(cmd.Context(), client, args[0], f.istioNamespace); err != nil {
				return err
			}
			tag := revtag.Tag{Name: args[0], Revision: rev}
			return output.print(cmd.OutOrStdout(), tag, func() []string { return []string{tag.Name} }, func() error {
				_, err := fmt.Fprintf(cmd.OutOrStdout(), "tag %s removed\n", args[0])
				return err
			})
		},
	}
	f.bind(cmd)
	output.addFlag(cmd)
	return cmd
}

// printTag prints tag as `tag list` lists it (in the -o format), or calls human.
func printTag(cmd *cobra.Command, client kubernetes.Interface, output dataOutput, tag, istioNamespace string, human func() error) error {
	if output.human() {
		return human()
	}
	tags, err := revtag.List(cmd.Context(), client, istioNamespace)
	if err != nil {
		return err
	}
	for _, t := range tags {
		if t.Name == tag {
			return output.print(cmd.OutOrStdout(), t, func() []string { return []string{t.Name} }, human)
		}
	}
	return fmt.Errorf("tag %s was set but is not listed", tag)
}
