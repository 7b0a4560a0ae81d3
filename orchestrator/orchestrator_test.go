package orchestrator

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	metafake "k8s.io/client-go/metadata/fake"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/metrics"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// testOrchestrator is an Orchestrator over a fake clientset holding objs
// and an in-memory NodeRollout API holding nrs.
func testOrchestrator(t *testing.T, objs []runtime.Object, nrs ...*v1alpha1.NodeRollout) (*Orchestrator, *fake.Clientset, *fixture.Rollouts) {
	t.Helper()
	cfg := testConfig()
	cfg.Identity = "replica-a"
	cfg.Resync = 20 * time.Millisecond
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	m, err := metrics.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	kube := fake.NewClientset(objs...)
	api := fixture.NewRollouts(nrs...)
	return &Orchestrator{cfg: cfg, log: zap.NewNop(), metrics: m, kube: kube, meta: nodeMetadata(t, kube), leaseKube: kube, rollouts: watchableRollouts{api}}, kube, api
}

// nodeMetadata holds the metadata of kube's nodes as they are now (what a
// new leader's catch-up reads).
func nodeMetadata(t *testing.T, kube *fake.Clientset) *metafake.FakeMetadataClient {
	t.Helper()
	list, err := kube.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var nodes []*corev1.Node
	for i := range list.Items {
		nodes = append(nodes, &list.Items[i])
	}
	return fixture.NodeMetadata(nodes...)
}

// TestRunLeadsAndReconciles: Run syncs its caches, takes the Lease and,
// while leading, reconciles every NodeRollout (here: a fleet already on the
// newest revisions completes); when its context ends it returns nil and
// stops leading.
func TestRunLeadsAndReconciles(t *testing.T) {
	o, kube, api := testOrchestrator(t, cluster(fixture.NewHash, "n1", "n2"), rollout("r", nil))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- o.Run(ctx) }()

	var got *v1alpha1.NodeRollout
	for ctx.Err() == nil {
		if got = api.Stored("r"); got.Status.Phase == v1alpha1.PhaseCompleted {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got.Status.Phase != v1alpha1.PhaseCompleted || got.Status.Counts.Done != 2 {
		t.Fatalf("status %+v, want Completed with 2 nodes done", got.Status)
	}
	lease, err := kube.CoordinationV1().Leases("nodewise-system").Get(ctx, model.LeaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "replica-a" {
		t.Errorf("lease holder %v, want replica-a", lease.Spec.HolderIdentity)
	}
	if v := testutil.ToFloat64(o.metrics.IsLeader); v != 1 {
		t.Errorf("is-leader gauge %v while leading, want 1", v)
	}
	for _, n := range []string{"n1", "n2"} {
		node, err := kube.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if node.Annotations[model.AnnotationStep] != string(v1alpha1.NodeDone) {
			t.Errorf("node %s record %v, want Done", n, node.Annotations)
		}
	}

	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after its context ended: %v, want nil", err)
	}
	if v := testutil.ToFloat64(o.metrics.IsLeader); v != 0 {
		t.Errorf("is-leader gauge %v after Run, want 0", v)
	}
}

// TestRunEndsWhileSyncing: a context that ends before the caches sync ends
// Run without an error and without campaigning.
func TestRunEndsWhileSyncing(t *testing.T) {
	o, kube, _ := testOrchestrator(t, nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := o.Run(ctx); err != nil {
		t.Fatalf("Run: %v, want nil", err)
	}
	for _, a := range kube.Actions() {
		if a.GetResource().Resource == "leases" {
			t.Errorf("campaigned before the caches synced: %v", a)
		}
	}
}

// TestEventScheme knows NodeRollouts, so events can be recorded on them.
func TestEventScheme(t *testing.T) {
	gvks, _, err := eventScheme().ObjectKinds(&v1alpha1.NodeRollout{})
	if err != nil || len(gvks) == 0 || gvks[0].Kind != "NodeRollout" {
		t.Errorf("NodeRollout kinds %v, %v", gvks, err)
	}
}
