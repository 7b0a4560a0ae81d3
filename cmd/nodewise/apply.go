package main

import (
	"fmt"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

func newApplyCmd(g *globalFlags) *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "apply -f rollout.yaml",
		Short: "Validate a NodeRollout against the cluster, then create it or update its spec",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			nr, _, err := loadAndCheck(ctx, g, file, false)
			if err != nil {
				return err
			}
			_, rc, err := rolloutClients(g)
			if err != nil {
				return err
			}
			verb := "created"
			err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				cur, err := rc.Get(ctx, nr.Name, metav1.GetOptions{})
				if apierrors.IsNotFound(err) {
					_, err = rc.Create(ctx, nr, metav1.CreateOptions{FieldManager: "nodewise-cli"})
					return err
				}
				if err != nil {
					return err
				}
				verb = "updated"
				cur.Spec = nr.Spec
				_, err = rc.Update(ctx, cur, metav1.UpdateOptions{})
				return err
			})
			if err != nil {
				return fmt.Errorf("applying NodeRollout %s: %w", nr.Name, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "noderollout.nodewise.io/%s %s\n", nr.Name, verb)
			return nil
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "NodeRollout manifest (required)")
	_ = cmd.MarkFlagRequired("filename")
	return cmd
}
