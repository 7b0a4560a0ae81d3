package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/remote"
)

// fieldManager owns the fields `nodewise apply` sets (server-side apply).
// Fields the file leaves out stay with whoever set them: re-applying a file
// without `paused:` leaves a paused rollout paused.
const fieldManager = "nodewise"

func newApplyCmd(g *globalFlags) *cobra.Command {
	var (
		file  string
		force bool
		addrs remote.AddressPolicy
	)
	out := newPrintFlags("applied")
	cmd := &cobra.Command{
		Use:   "apply -f rollout.yaml",
		Short: "Validate a NodeRollout against the cluster, then create or update it (server-side apply)",
		Long: "apply validates the file offline and through a server dry-run, checks its targets and\n" +
			"canaries against the cluster, then server-side applies it with field manager \"nodewise\".\n" +
			"Fields the file does not set keep their values, so `nodewise pause` survives a re-apply.\n" +
			"An apply that pauses, resumes, aborts or rolls back the rollout names you as who asks\n" +
			"(nodewise.io/paused-by, resumed-by, aborted-by, rolled-back-by), as the verbs do.",
		Example: "  nodewise apply -f rollout.yaml\n  kubectl nodewise apply -f - < rollout.yaml",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			printer, err := out.toPrinter()
			if err != nil {
				return err
			}
			rf, err := readRollout(ctx, cmd.InOrStdin(), file, addrs)
			if err != nil {
				return err
			}
			rf.warn(cmd.ErrOrStderr())
			if err := checkRollout(ctx, g, rf, addrs, false); err != nil {
				return err
			}
			rc, err := applyClient(g)
			if err != nil {
				return err
			}
			before, err := rc.Get(ctx, rf.rollout.Name, metav1.GetOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("reading NodeRollout %s: %w", rf.rollout.Name, g.clarify(ctx, err))
			}
			existed := err == nil
			applied, err := applyRollout(ctx, rc, rf, force, false)
			if err != nil {
				return g.clarify(ctx, err)
			}
			verb := "created"
			if existed {
				verb = "configured"
				if before.GetResourceVersion() == applied.GetResourceVersion() {
					verb = "unchanged"
				}
			}
			return printer.print(cmd.OutOrStdout(), applied, verb)
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "NodeRollout manifest, YAML or JSON, one object (- reads stdin; required)")
	cmd.Flags().BoolVar(&force, "force-conflicts", false, "take over fields another manager (a kubectl edit, nodewise pause) set to a different value")
	out.addFlags(cmd)
	addGateAddressFlags(cmd, &addrs)
	_ = cmd.MarkFlagRequired("filename")
	return cmd
}

// checkRollout checks a read and locally valid rollout: its gates and, unless
// offline, a server dry-run (the CRD's own validation, and whether the CRDs
// exist), then its targets and canaries against the cluster.
func checkRollout(ctx context.Context, g *globalFlags, rf rolloutFile, addrs remote.AddressPolicy, offline bool) error {
	if err := checkGates(ctx, rf.rollout.Spec.Gates, addrs, offline); err != nil {
		return err
	}
	if offline {
		return nil
	}
	rc, err := applyClient(g)
	if err != nil {
		return err
	}
	if _, err := applyRollout(ctx, rc, rf, false, true); err != nil {
		switch {
		case apierrors.IsForbidden(err):
			// plan is read-only; a user who may not write rollouts still gets a plan.
		default:
			return g.clarify(ctx, err)
		}
	}
	d, err := planAgainstCluster(ctx, g, rf.rollout, rf.policy)
	if err != nil {
		return err
	}
	if d.Phase == v1alpha1.PhasePending {
		return errors.New(d.Reason)
	}
	return nil
}

// applyClient is the NodeRollout client apply writes through: it names who
// asks for each verb (pause, resume, abort, rollback) an apply makes of the
// live rollout (requesterRollouts), which the admission policy
// nodewise-verb-requester requires in the same write.
func applyClient(g *globalFlags) (*requesterRollouts, error) {
	kube, rc, err := rolloutClients(g)
	if err != nil {
		return nil, err
	}
	return &requesterRollouts{NodeRolloutInterface: rc, kube: kube}, nil
}

// applyRollout server-side applies the document as written (not the typed
// object, whose omitempty would hide an explicit `paused: false`), through
// rc, which adds the annotations naming who asks (applyClient).
func applyRollout(ctx context.Context, rc *requesterRollouts, rf rolloutFile, force, dryRun bool) (*v1alpha1.NodeRollout, error) {
	opts := metav1.PatchOptions{FieldManager: fieldManager, Force: &force}
	what := "applying"
	if dryRun {
		// Forced: the dry run checks the object; ownership is the real apply's to report.
		opts.DryRun, opts.Force = []string{metav1.DryRunAll}, ptr.To(true)
		what = "validating (server dry-run)"
	}
	applied, err := rc.Patch(ctx, rf.rollout.Name, types.ApplyPatchType, rf.doc, opts)
	if err != nil {
		if apierrors.IsConflict(err) && !force {
			return nil, fmt.Errorf("%s NodeRollout %s: %s (re-run with --force-conflicts to take them over)", what, rf.rollout.Name, firstLine(err.Error()))
		}
		return nil, fmt.Errorf("%s NodeRollout %s: %w", what, rf.rollout.Name, err)
	}
	return applied, nil
}
