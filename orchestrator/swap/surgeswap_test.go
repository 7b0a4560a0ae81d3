package swap

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
)

// TestSurgeSwap: the surge swap over the caches, end to end against a fake
// API whose caches follow its writes. It creates the bridge, retires the
// old pod once the bridge is Ready (by UID, propagationPolicy Orphan, which
// hands the bridge to the DaemonSet) and is done; a bridge not Ready by the
// swap timeout (the fake clock) or rejected by the kubelet is deleted and
// the swap halts with the old pod kept; a write the API refuses for good
// halts swap_failed; other errors are returned plain, for the worker to
// retry.
func TestSurgeSwap(t *testing.T) {
	old := fixture.SurgePod("old", "old", 0)
	bridge := BridgePod(fixture.SurgeDS, fixture.SurgeRev, "n1", old).Name
	for _, tc := range []struct {
		name string
		ds   bool          // the DaemonSet is cached
		pods []*corev1.Pod // in the API and the caches
		// kubelet starts the bridge (c.now is when it is created).
		kubelet    func(c *cluster, p *corev1.Pod)
		setup      func(c *cluster)
		wantErr    func(error) bool // nil: no error
		wantHalt   string
		wantReason string
		wantWrites []string
		wantAPI    []string // the pods left in the API, sorted
	}{
		{name: "bridge Ready: the old pod retired, the bridge handed over: done", ds: true, pods: []*corev1.Pod{old},
			kubelet:    func(c *cluster, p *corev1.Pod) { running(true)(p) },
			wantWrites: []string{"create " + bridge, "delete old"}, wantAPI: []string{bridge}},
		{name: "already the DaemonSet's Ready pod on the newest revision: no write", ds: true, pods: []*corev1.Pod{fixture.SurgePod("new", "new", time.Hour)},
			wantAPI: []string{"new"}},
		{name: "bridge never Ready: halt swap_timeout, the bridge deleted, the old pod kept", ds: true, pods: []*corev1.Pod{old},
			kubelet: func(c *cluster, p *corev1.Pod) {
				crashLooping(p)
				c.now = c.now.Add(2 * time.Minute) // the swap timeout is a minute
			},
			wantErr: isStepError, wantHalt: nodestep.HaltSwapTimeout, wantReason: "not Ready (CrashLoopBackOff, 3 restarts); deleted the never-Ready bridge",
			wantWrites: []string{"create " + bridge, "delete " + bridge}, wantAPI: []string{"old"}},
		{name: "bridge rejected by the kubelet: halt swap_failed with its reason, the bridge deleted", ds: true, pods: []*corev1.Pod{old},
			kubelet: func(c *cluster, p *corev1.Pod) { fixture.OutOfCPU(p) },
			wantErr: isStepError, wantHalt: nodestep.HaltSwapFailed, wantReason: "OutOfcpu",
			wantWrites: []string{"create " + bridge, "delete " + bridge}, wantAPI: []string{"old"}},
		{name: "bridge create Forbidden (a quota): halt swap_failed with the API's reason", ds: true, pods: []*corev1.Pod{old},
			setup: func(c *cluster) {
				c.fail("create", "", apierrors.NewForbidden(podsGR, bridge, errors.New("exceeded quota: pods")))
			},
			wantErr: isStepError, wantHalt: nodestep.HaltSwapFailed, wantReason: "exceeded quota",
			wantWrites: []string{"create " + bridge}, wantAPI: []string{"old"}},
		{name: "old pod's delete answering 500: a plain error, the Ready bridge kept", ds: true, pods: []*corev1.Pod{old},
			kubelet: func(c *cluster, p *corev1.Pod) { running(true)(p) },
			setup: func(c *cluster) {
				c.fail("delete", "old", apierrors.NewInternalError(errors.New("etcd leader changed")))
			},
			wantErr: apierrors.IsInternalError, wantReason: "surge swap of istio-system/ztunnel on n1",
			wantWrites: []string{"create " + bridge, "delete old"}, wantAPI: sortedNames(map[string]bool{bridge: true, "old": true})},
		{name: "a look-alike pod in another namespace is not the node's ztunnel", ds: true,
			pods:    []*corev1.Pod{fixture.SurgePod("new", "new", time.Hour), fixture.SurgePod("impostor", "new", 2*time.Hour, fixture.HandedOver, func(p *corev1.Pod) { p.Namespace = "default" })},
			wantAPI: []string{"impostor", "new"}},
		{name: "no DaemonSet: halt preflight_failed, no write", pods: []*corev1.Pod{old},
			wantErr: isStepError, wantHalt: nodestep.HaltPreflightFailed, wantAPI: []string{"old"}},
		{name: "DaemonSet deleted mid-swap: a plain error naming it", ds: true, pods: []*corev1.Pod{old},
			kubelet: func(c *cluster, p *corev1.Pod) {
				if err := c.dss.Delete(fixture.SurgeDS); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: apierrors.IsNotFound, wantReason: "reading DaemonSet istio-system/ztunnel",
			wantWrites: []string{"create " + bridge}, wantAPI: sortedNames(map[string]bool{bridge: true, "old": true})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c *cluster
			if tc.ds {
				c = newCluster(t, fixture.SurgeDS, tc.pods...)
			} else {
				c = newCluster(t, nil, tc.pods...)
			}
			if tc.kubelet != nil {
				c.kubelet = func(p *corev1.Pod) { tc.kubelet(c, p) }
			}
			if tc.setup != nil {
				tc.setup(c)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second) // a safety net: no case waits
			defer cancel()
			err := c.surge().Swap(ctx, fixture.ZtunnelTarget, "n1", c.now.Add(time.Minute), time.Minute)
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("Swap: %v; want done", err)
			case tc.wantErr != nil && !tc.wantErr(err):
				t.Fatalf("Swap: %v (%T); not the error wanted", err, err)
			}
			if got := halt(err); got != tc.wantHalt {
				t.Errorf("halt %q, want %q (%v)", got, tc.wantHalt, err)
			}
			if tc.wantReason != "" && !strings.Contains(err.Error(), tc.wantReason) {
				t.Errorf("error %q does not say %q", err, tc.wantReason)
			}
			writes, opts := c.podWrites()
			if strings.Join(writes, ",") != strings.Join(tc.wantWrites, ",") {
				t.Errorf("writes %v, want %v", writes, tc.wantWrites)
			}
			for i, o := range opts {
				if o.Preconditions == nil || o.Preconditions.UID == nil || *o.Preconditions.UID == "" {
					t.Errorf("delete %d without a UID precondition: %+v", i, o)
				}
			}
			pods := c.apiPods()
			if got := sortedNames(pods); strings.Join(got, ",") != strings.Join(tc.wantAPI, ",") {
				t.Errorf("pods in the API %v, want %v", got, tc.wantAPI)
			}
			if tc.wantErr == nil && len(tc.wantWrites) > 0 {
				// The retire handed the bridge over: deleted with
				// propagationPolicy Orphan, now the DaemonSet's.
				if p := opts[len(opts)-1].PropagationPolicy; p == nil || *p != metav1.DeletePropagationOrphan {
					t.Errorf("anchor deleted with propagationPolicy %v, want Orphan", p)
				}
				if !metav1.IsControlledBy(pods[bridge], fixture.SurgeDS) {
					t.Errorf("bridge owners %+v; want the DaemonSet's", pods[bridge].OwnerReferences)
				}
			}
		})
	}
}

// TestSurgeSwapEndsWithItsContext: a surge swap waiting for its bridge to
// be Ready returns its context's error once it is cancelled, and leaves the
// bridge (an abandoned swap's cleanup is Abandon's).
func TestSurgeSwapEndsWithItsContext(t *testing.T) {
	c := newCluster(t, fixture.SurgeDS, fixture.SurgePod("old", "old", 0))
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second) // cancelled below; the timeout is a safety net
	defer cancel()
	c.kubelet = func(p *corev1.Pod) {
		running(false)(p)
		cancel()
	}
	err := c.surge().Swap(ctx, fixture.ZtunnelTarget, "n1", c.now.Add(time.Minute), time.Minute)
	if !errors.Is(err, context.Canceled) || halt(err) != "" {
		t.Fatalf("Swap: %v; want context.Canceled, no halt", err)
	}
	if got := len(c.apiPods()); got != 2 {
		t.Errorf("%d pods in the API, want the old pod and the bridge", got)
	}
}

// TestSurgeSwapPodCacheError: a surge swap that cannot list the node's pods
// returns the error, wrapped, and writes nothing.
func TestSurgeSwapPodCacheError(t *testing.T) {
	c := newCluster(t, fixture.SurgeDS, fixture.SurgePod("old", "old", 0))
	boom := errors.New("pod index missing")
	s := c.surge()
	s.Pods = failingPods{boom}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second) // a safety net: no wait expected
	defer cancel()
	err := s.Swap(ctx, fixture.ZtunnelTarget, "n1", c.now.Add(time.Minute), time.Minute)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "listing pods on node n1") || halt(err) != "" {
		t.Fatalf("Swap: %v; want the listing error, no halt", err)
	}
	if writes, _ := c.podWrites(); len(writes) != 0 {
		t.Errorf("writes %v; want none", writes)
	}
}

// TestSurgeSwapCountsFromTheBridge: once the node has its bridge, the
// swap timeout runs from the bridge's creation (read from the API, so a
// resumed swap finds it), not from the caller's deadline: a bridge younger
// than the timeout is waited for (until the context's short deadline here)
// though the caller's deadline has passed; an older one times out and goes.
func TestSurgeSwapCountsFromTheBridge(t *testing.T) {
	old := fixture.SurgePod("old", "old", 0)
	for _, tc := range []struct {
		name     string
		age      time.Duration // the bridge's, by the cluster's clock; the timeout is a minute
		timesOut bool
		wantAPI  int // pods left in the API
	}{
		{name: "bridge 30s old: waited for", age: 30 * time.Second, wantAPI: 2},
		{name: "bridge 2m old: halt swap_timeout, the bridge deleted", age: 2 * time.Minute, timesOut: true, wantAPI: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, fixture.SurgeDS, old)
			b := BridgePod(fixture.SurgeDS, fixture.SurgeRev, "n1", old)
			b.UID, b.CreationTimestamp = "b-uid", metav1.NewTime(c.now.Add(-tc.age))
			running(false)(b)
			c.put(b)
			c.sync()
			ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
			defer cancel()
			err := c.surge().Swap(ctx, fixture.ZtunnelTarget, "n1", c.now.Add(-time.Minute), time.Minute)
			if tc.timesOut && halt(err) != nodestep.HaltSwapTimeout {
				t.Fatalf("Swap: %v; want a swap_timeout halt", err)
			}
			if !tc.timesOut && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Swap: %v; want it still waiting when the context ended", err)
			}
			if got := len(c.apiPods()); got != tc.wantAPI {
				t.Errorf("%d pods in the API, want %d", got, tc.wantAPI)
			}
		})
	}
}

// failingPods is a pod cache whose reads fail.
type failingPods struct{ err error }

func (f failingPods) OnNode(string) ([]*corev1.Pod, error) { return nil, f.err }
