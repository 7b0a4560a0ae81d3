package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

func newRetryCmd(g *globalFlags) *cobra.Command {
	return newNodeVerbCmd(g, model.VerbRetry, "retry NODE",
		"Run a failed node again from preflight (its record back to Pending); ends the halt its failure made when no other node failed")
}

func newSkipCmd(g *globalFlags) *cobra.Command {
	return newNodeVerbCmd(g, model.VerbSkip, "skip NODE --reason TEXT",
		"Leave a pending or failed node out of the rollout (Skipped, with the reason and who in status, and an Event)")
}

// newNodeVerbCmd builds retry and skip: both write a node request on the
// NodeRollout (model.NodeRequest), conditionally on the status they checked,
// and the orchestrator acts on it, checking the node again from its record.
func newNodeVerbCmd(g *globalFlags, verb, use, short string) *cobra.Command {
	operation := verb + " requested"
	out := newPrintFlags(operation)
	var rollout, reason string
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if verb == model.VerbSkip && strings.TrimSpace(reason) == "" {
				return errors.New("--reason is required: say why the node is skipped (it is recorded in status)")
			}
			printer, err := out.toPrinter()
			if err != nil {
				return err
			}
			kube, rc, err := rolloutClients(g)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			user, err := whoAmI(ctx, kube)
			if err != nil {
				return g.clarify(ctx, err)
			}
			req := model.NodeRequest{Token: time.Now().UTC().Format(time.RFC3339Nano), Verb: verb, Node: args[0], Reason: reason}
			var nr *v1alpha1.NodeRollout
			err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				cur, err := rolloutOfNode(ctx, rc, rollout, req.Node)
				if err != nil {
					return err
				}
				if err := checkNodeRequest(cur, req); err != nil {
					return err
				}
				raw, _ := json.Marshal(req)
				if cur.Annotations == nil {
					cur.Annotations = map[string]string{}
				}
				cur.Annotations[model.AnnotationNodeRequest] = string(raw)
				cur.Annotations[model.AnnotationNodeRequestBy] = user // who asks: admission holds it to the authenticated user
				// An update with the resourceVersion read: a status that
				// changed since the check above is a conflict, checked again.
				nr, err = rc.Update(ctx, cur, metav1.UpdateOptions{FieldManager: patchFieldManager})
				return err
			})
			if err != nil {
				return g.clarify(ctx, err)
			}
			return printer.print(cmd.OutOrStdout(), nr, operation)
		},
	}
	cmd.Flags().StringVarP(&rollout, "rollout", "r", "", "the NodeRollout (default: the one whose status lists the node)")
	if verb == model.VerbSkip {
		cmd.Flags().StringVar(&reason, "reason", "", "why the node is skipped, recorded in status (required)")
		_ = cmd.MarkFlagRequired("reason")
	} else {
		cmd.Flags().StringVar(&reason, "reason", "", "why the node is retried, recorded in status")
	}
	out.addFlags(cmd)
	return cmd
}

// rolloutOfNode is the NodeRollout named, or else the one unfinished
// NodeRollout whose status lists the node.
func rolloutOfNode(ctx context.Context, rc v1alpha1.NodeRolloutInterface, name, node string) (*v1alpha1.NodeRollout, error) {
	if name != "" {
		nr, err := rc.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading NodeRollout %s: %w", name, err)
		}
		return nr, nil
	}
	list, err := rc.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing NodeRollouts: %w", err)
	}
	var found []*v1alpha1.NodeRollout
	for i := range list.Items {
		nr := &list.Items[i]
		if !finished(nr.Status.Phase) && slices.ContainsFunc(nr.Status.Nodes, func(ns v1alpha1.NodeStatus) bool { return ns.Name == node }) {
			found = append(found, nr)
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("node %s is in no unfinished NodeRollout's status: check the name (nodewise get), or name the rollout with --rollout", node)
	case 1:
		return found[0], nil
	}
	var names []string
	for _, nr := range found {
		names = append(names, nr.Name)
	}
	return nil, fmt.Errorf("node %s is in the status of NodeRollouts %s: name one with --rollout", node, strings.Join(names, ", "))
}

// finished: the rollout acts on no node any more (Failed: it could not
// start; a spec change that wakes it plans its nodes afresh).
func finished(p v1alpha1.RolloutPhase) bool {
	switch p {
	case v1alpha1.PhaseCompleted, v1alpha1.PhaseAborted, v1alpha1.PhaseRolledBack, v1alpha1.PhaseFailed, v1alpha1.PhaseIdle:
		return true
	}
	return false
}

// checkNodeRequest refuses, with one line, what the orchestrator would
// refuse as the status shows the node (it checks again from the node's
// record), and a request while another is still waiting for it.
func checkNodeRequest(nr *v1alpha1.NodeRollout, r model.NodeRequest) error {
	refused := func(format string, args ...any) error {
		return fmt.Errorf("cannot %s node %s in NodeRollout %s: %s", r.Verb, r.Node, nr.Name, fmt.Sprintf(format, args...))
	}
	if finished(nr.Status.Phase) {
		return refused("the rollout is %s", nr.Status.Phase)
	}
	if nr.Spec.Abort || nr.Spec.Rollback {
		return refused("the rollout is aborting or rolling back")
	}
	if prev, pending, _ := model.PendingNodeRequest(nr.Annotations); pending {
		return refused("its %s of node %s (requested %s) is not acted on yet; try again once it is (is the orchestrator running?)", prev.Verb, prev.Node, prev.Token)
	}
	i := slices.IndexFunc(nr.Status.Nodes, func(ns v1alpha1.NodeStatus) bool { return ns.Name == r.Node })
	switch {
	case i < 0 && nr.Status.Omitted != nil:
		return nil // a status over its budget omits nodes: the orchestrator checks the node's record
	case i < 0:
		return refused("no such node in its status (nodewise get %s lists them)", nr.Name)
	}
	if why := model.RequestRefusal(r.Verb, nr.Status.Nodes[i].State); why != "" {
		return refused("%s", why)
	}
	return nil
}
