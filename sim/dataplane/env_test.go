package dataplane

import (
	"context"
	"os"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/testkit"
)

// liveEnv is a simulated cluster whose pods run on the live data plane,
// with Istio installed.
type liveEnv struct {
	t  *testing.T
	dp *DataPlane
	c  *cluster.Cluster
}

func newLiveEnv(t *testing.T, nodes int, traffic Traffic) *liveEnv {
	t.Helper()
	testkit.RequireNetns(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dp, err := New(Config{StandinArgv: []string{exe, "-test.run=^$"}, StandinLog: os.Stderr, Traffic: traffic})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dp.Close(); err != nil {
			t.Errorf("closing the data plane: %v", err)
		}
		if left := listNetns(dp.Prefix()); len(left) > 0 {
			t.Errorf("namespaces left behind: %v", left)
		}
	})
	c := cluster.Start(t, cluster.Options{Nodes: nodes, Zones: 1, ReadyDelay: 300 * time.Millisecond, Runtime: dp})
	dp.UseCluster(c)
	if err := cluster.InstallIstio(context.Background(), c.Client, cluster.IstioOptions{Version: "1.27.3", UpdateStrategy: appsv1.OnDeleteDaemonSetStrategyType}); err != nil {
		t.Fatal(err)
	}
	e := &liveEnv{t: t, dp: dp, c: c}
	e.waitAppsReady()
	return e
}

func (e *liveEnv) waitAppsReady() {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		ds, err := e.c.Client.AppsV1().Deployments("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, d := range ds.Items {
			if d.Namespace != cluster.IstioNamespace && d.Status.AvailableReplicas != *d.Spec.Replicas {
				return false, nil
			}
		}
		return len(ds.Items) > 0, nil
	})
	if err != nil {
		e.t.Fatalf("sample apps not ready: %v", err)
	}
}
