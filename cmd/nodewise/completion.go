package main

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// completionTimeout keeps a tab press from waiting on a slow server.
const completionTimeout = 5 * time.Second

type completer func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective)

// completeRollouts completes the first argument with NodeRollout names.
func completeRollouts(g *globalFlags) completer {
	return func(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		_, rc, err := rolloutClients(g)
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
		defer cancel()
		list, err := rc.List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		var names []string
		for _, nr := range list.Items {
			if strings.HasPrefix(nr.Name, prefix) {
				names = append(names, nr.Name)
			}
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeRolloutNodes completes --node with the nodes of the rollout named
// by the first argument, or with the cluster's nodes before it is given.
func completeRolloutNodes(g *globalFlags) completer {
	return func(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		kube, rc, err := rolloutClients(g)
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
		defer cancel()
		var names []string
		if len(args) > 0 {
			nr, err := rc.Get(ctx, args[0], metav1.GetOptions{})
			if err != nil {
				return nil, cobra.ShellCompDirectiveError
			}
			for _, n := range nr.Status.Nodes {
				names = append(names, n.Name)
			}
		} else {
			nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, cobra.ShellCompDirectiveError
			}
			for _, n := range nodes.Items {
				names = append(names, n.Name)
			}
		}
		var out []string
		for _, n := range names {
			if strings.HasPrefix(n, prefix) {
				out = append(out, n)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
