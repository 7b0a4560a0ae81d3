package revisions

import (
	"context"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
)

// The restart machinery of the sidecar wing, for the PodAgePolicy
// controller (package podage) that restarts workloads the same way.

// Workload is a Deployment, StatefulSet or DaemonSet as far as restarting goes.
type Workload = workload

// WorkloadsOf groups the Deployments, StatefulSets and DaemonSets by
// namespace. It is pure.
func WorkloadsOf(deps []appsv1.Deployment, sts []appsv1.StatefulSet, dss []appsv1.DaemonSet) map[string][]Workload {
	return workloadsOf(deps, sts, dss)
}

// Restart stamps w's pod template with stamp, as `kubectl rollout restart`
// does; the same stamp again changes nothing.
func Restart(ctx context.Context, c kubernetes.Interface, w Workload, stamp string) error {
	return restart(ctx, c, w, stamp)
}

// PDBBlock says why restarting w now could break a PodDisruptionBudget of
// its namespace, or "" when it cannot (see pdbBlock). It is pure.
func PDBBlock(pdbs []policyv1.PodDisruptionBudget, w Workload, all []Workload, stamp string) string {
	return pdbBlock(pdbs, w, all, stamp)
}

// JudgementOf is the persisted form of a wave's verdict, its reasons and
// rows bounded as a RevisionMigration's status holds them.
func JudgementOf(v health.Verdict) *v1alpha1.WaveJudgement { return judgementOf(v) }

// Bucket is a token bucket of pod restarts (see bucket).
type Bucket = bucket

// NewBucket is an empty bucket of podsPerSecond tokens a second.
func NewBucket(podsPerSecond int32, now time.Time) *Bucket { return newBucket(podsPerSecond, now) }

// Take spends n tokens if the bucket allows it now, and otherwise says how
// long until it will.
func (b *bucket) Take(n int, now time.Time) (bool, time.Duration) { return b.take(n, now) }
