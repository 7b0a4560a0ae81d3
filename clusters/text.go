package clusters

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// notInstalled: the API server does not serve the resource (its CRD is
// not installed), which a cluster without nodewise answers.
func notInstalled(err error) bool {
	return apierrors.IsNotFound(err) || meta.IsNoMatchError(err)
}

// rolloutReason is why a NodeRollout halted, is invalid, or waits.
func rolloutReason(s *v1alpha1.NodeRolloutStatus) string {
	if r := s.PhaseReason(); r != "" {
		return r
	}
	if c := meta.FindStatusCondition(s.Conditions, "Reconciling"); c != nil && c.Status == "True" {
		return c.Message
	}
	return ""
}

// wavesDone is how many of a migration's waves are behind it.
func wavesDone(s v1alpha1.RevisionMigrationStatus) int {
	if s.Phase == v1alpha1.MigrationSucceeded {
		return len(s.Waves)
	}
	return min(int(s.CurrentWave), len(s.Waves))
}

// oneLine is err as one line; a deadline says which.
func oneLine(ctx context.Context, err error, timeout time.Duration) string {
	msg := err.Error()
	var ue *url.Error // "Get \"https://…/apis/…?labelSelector=…\": dial tcp …": the URL says nothing here
	if errors.As(err, &ue) {
		msg = strings.Replace(msg, ue.Error(), ue.Err.Error(), 1)
	}
	msg = strings.Join(strings.Fields(msg), " ")
	if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		return fmt.Sprintf("no answer within %s: %s", timeout, msg)
	}
	return msg
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
