package cluster

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"k8s.io/kubectl/pkg/util/podutils"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
)

// The real API server refuses an eviction that would break a PDB with 429 and
// grants one within budget.
func TestEvictionRespectsPDB(t *testing.T) {
	c := Start(t, Options{Nodes: 4, Zones: 2})
	ctx := testContext(t, 3*time.Minute)
	createNamespace(t, ctx, c.Client, "pdb")
	if _, err := c.Client.AppsV1().Deployments("pdb").Create(ctx, simpleDeployment("pdb", "web", 3, "example/web:1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := waitPods(t, ctx, c.Client, "pdb", "app=web", func(p []corev1.Pod) bool {
		n := 0
		for i := range p {
			if podutils.IsPodReady(&p[i]) {
				n++
			}
		}
		return n == 3
	})
	minAvailable := intstr.FromInt32(3)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "pdb"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: &minAvailable,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
	}
	if _, err := c.Client.PolicyV1().PodDisruptionBudgets("pdb").Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPDB(t, ctx, c, 0, 3)

	err := c.Client.PolicyV1().Evictions("pdb").Evict(ctx, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: pods[0].Name, Namespace: "pdb"}})
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Code != http.StatusTooManyRequests {
		t.Fatalf("eviction breaking the PDB: got %v, want HTTP 429", err)
	}

	// Loosen the budget to allow one disruption: the same eviction succeeds.
	cur, err := c.Client.PolicyV1().PodDisruptionBudgets("pdb").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	two := intstr.FromInt32(2)
	cur.Spec.MinAvailable = &two
	if _, err := c.Client.PolicyV1().PodDisruptionBudgets("pdb").Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPDB(t, ctx, c, 1, 3)
	if err := c.Client.PolicyV1().Evictions("pdb").Evict(ctx, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: pods[0].Name, Namespace: "pdb"}}); err != nil {
		t.Fatalf("eviction within budget: %v", err)
	}
	// The evicted pod goes away (the simulated kubelet honours the deletion)
	// and the ReplicaSet replaces it.
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().Pods("pdb").Get(ctx, pods[0].Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("evicted pod %s was never removed: %v", pods[0].Name, err)
	}
}

// waitPDB waits until the disruption controller has observed the budget.
func waitPDB(t *testing.T, ctx context.Context, c *Cluster, allowed, healthy int32) {
	t.Helper()
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := c.Client.PolicyV1().PodDisruptionBudgets("pdb").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return p.Status.ObservedGeneration == p.Generation && p.Status.DisruptionsAllowed == allowed && p.Status.CurrentHealthy == healthy, nil
	})
	if err != nil {
		t.Fatalf("PDB never reached disruptionsAllowed=%d healthy=%d: %v", allowed, healthy, err)
	}
}
