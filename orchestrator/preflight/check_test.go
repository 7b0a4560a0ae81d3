package preflight

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	appslisters "k8s.io/client-go/listers/apps/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio/skew"
	"github.com/nodewise/nodewise/orchestrator/internal/fixture"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
)

var (
	t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

	webhooksGR    = schema.GroupResource{Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations"}
	deploymentsGR = schema.GroupResource{Group: "apps", Resource: "deployments"}
)

// templates1_28 are the default targets' DaemonSets with 1.28.1 templates
// on revision 1-28.
func templates1_28() []*appsv1.DaemonSet {
	return []*appsv1.DaemonSet{
		targetDS("istio-cni-node", "docker.io/istio/install-cni:1.28.1", "1-28"),
		targetDS("ztunnel", "docker.io/istio/ztunnel:1.28.1", "1-28"),
	}
}

// controlPlane1_28 is an istiod of revision 1-28 at 1.28.1, the default tag
// on it, and an unrelated webhook.
func controlPlane1_28() []runtime.Object {
	return []runtime.Object{istiod("1-28", "1.28.1"), tagWebhook("default", "1-28"), wh("unrelated", map[string]string{"x": "y"})}
}

// newSkew is the check over kube and a DaemonSet cache of dss, on a clock
// the test moves.
func newSkew(kube *fake.Clientset, dss appslisters.DaemonSetLister, now *time.Time) *Skew {
	return &Skew{Kube: kube, DaemonSets: dss, Policy: skew.DefaultPolicy(), IstioNamespace: "istio-system",
		Now: func() time.Time { return *now }}
}

// lists counts the list requests of resource made on kube.
func lists(kube *fake.Clientset, resource string) int {
	n := 0
	for _, a := range kube.Actions() {
		if a.Matches("list", resource) {
			n++
		}
	}
	return n
}

// failList makes kube answer lists of resource with err.
func failList(kube *fake.Clientset, resource string, err error) {
	kube.PrependReactor("list", resource, func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, err })
}

// TestSkewCheck: a node's preflight passes when its templates are within the
// skew policy of the istiod that serves them; it halts the node
// (preflight_failed, naming why) when a target DaemonSet disappeared, when
// the API refuses to show the control plane (Forbidden, Unauthorized) and
// when the skew is outside the policy; any other API or cache error is
// returned as is, for the worker to retry.
func TestSkewCheck(t *testing.T) {
	forbidden := apierrors.NewForbidden(webhooksGR, "", errors.New(`User "system:serviceaccount:nodewise:orchestrator" cannot list resource`))
	for _, tc := range []struct {
		name  string
		dss   appslisters.DaemonSetLister // nil: templates1_28
		setup func(*testing.T, *fake.Clientset)
		// halt: substrings of the halt's reason; retry: the error returned
		// must satisfy it; neither: the check passes.
		halt  []string
		retry func(error) bool
	}{
		{name: "within the policy"},
		{
			name: "a target DaemonSet disappeared",
			dss:  daemonSets(targetDS("ztunnel", "docker.io/istio/ztunnel:1.28.1", "1-28")),
			halt: []string{"preflight: DaemonSet istio-system/istio-cni-node disappeared"},
		},
		{
			name:  "the DaemonSet cannot be read",
			dss:   fixture.FailingDaemonSets{Err: apierrors.NewServiceUnavailable("cache resyncing")},
			retry: apierrors.IsServiceUnavailable,
		},
		{
			name:  "listing the revision tags is forbidden",
			setup: func(t *testing.T, k *fake.Clientset) { failList(k, "mutatingwebhookconfigurations", forbidden) },
			halt:  []string{"preflight: cannot check the version skew", "listing revision tags", "forbidden", "cannot list resource"},
		},
		{
			name: "the API does not know the orchestrator",
			setup: func(t *testing.T, k *fake.Clientset) {
				failList(k, "mutatingwebhookconfigurations", apierrors.NewUnauthorized("token expired"))
			},
			halt: []string{"cannot check the version skew", "token expired"},
		},
		{
			name: "listing istiod is forbidden",
			setup: func(t *testing.T, k *fake.Clientset) {
				failList(k, "deployments", apierrors.NewForbidden(deploymentsGR, "", errors.New("no RBAC on deployments")))
			},
			halt: []string{"cannot check the version skew", "listing istiod deployments in istio-system", "no RBAC on deployments"},
		},
		{
			name: "the API times out listing the tags",
			setup: func(t *testing.T, k *fake.Clientset) {
				failList(k, "mutatingwebhookconfigurations", apierrors.NewTimeoutError("list timed out", 1))
			},
			retry: apierrors.IsTimeout,
		},
		{
			name: "the API fails listing istiod",
			setup: func(t *testing.T, k *fake.Clientset) {
				failList(k, "deployments", apierrors.NewInternalError(errors.New("etcd")))
			},
			retry: apierrors.IsInternalError,
		},
		{
			name: "ztunnel newer than its istiod",
			dss: daemonSets(targetDS("istio-cni-node", "docker.io/istio/install-cni:1.28.1", "1-28"),
				targetDS("ztunnel", "docker.io/istio/ztunnel:1.29.0", "1-28")),
			halt: []string{"preflight: the new templates break the supported version skew", "ztunnel 1.29 is newer than its control plane 1.28"},
		},
		{
			name: "both two minors behind",
			setup: func(t *testing.T, k *fake.Clientset) {
				if err := k.Tracker().Update(deploymentsGR.WithVersion("v1"), istiod("1-28", "1.30.0"), "istio-system"); err != nil {
					t.Fatal(err)
				}
			},
			halt: []string{"istio-cni 1.28 is 2 minors behind its control plane 1.30", "ztunnel 1.28 is 2 minors behind"},
		},
		{
			name: "a template with no container",
			dss:  daemonSets(targetDS("istio-cni-node", "", "1-28"), targetDS("ztunnel", "docker.io/istio/ztunnel:1.28.1", "1-28")),
			halt: []string{"cannot check the version skew of istio-system/istio-cni-node"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := fake.NewClientset(controlPlane1_28()...)
			if tc.setup != nil {
				tc.setup(t, kube)
			}
			dss := tc.dss
			if dss == nil {
				dss = daemonSets(templates1_28()...)
			}
			now := t0
			err := newSkew(kube, dss, &now).Check(t.Context(), fixture.Policy(t, nil), "zone-a-00")
			se, halted := haltOf(err)
			switch {
			case tc.halt != nil:
				if !halted || se.Halt != nodestep.HaltPreflightFailed || se.Skip {
					t.Fatalf("Check = %#v; want a preflight_failed halt", err)
				}
				for _, w := range tc.halt {
					if !strings.Contains(se.Reason, w) {
						t.Errorf("halt reason %q lacks %q", se.Reason, w)
					}
				}
			case tc.retry != nil:
				if err == nil || halted || !tc.retry(err) {
					t.Fatalf("Check = %v (halt: %v); want the API error returned for a retry", err, halted)
				}
			default:
				if err != nil {
					t.Fatalf("Check refused a node within the policy: %v", err)
				}
			}
		})
	}
}

// TestSkewCheckReadsNoControlPlaneWhenATargetIsGone: a disappeared DaemonSet
// halts before anything is listed.
func TestSkewCheckReadsNoControlPlaneWhenATargetIsGone(t *testing.T) {
	kube := fake.NewClientset(controlPlane1_28()...)
	now := t0
	err := newSkew(kube, daemonSets(), &now).Check(t.Context(), fixture.Policy(t, nil), "n1")
	if _, halted := haltOf(err); !halted {
		t.Fatalf("Check = %v; want a halt", err)
	}
	if n := len(kube.Actions()); n != 0 {
		t.Errorf("%d API requests for a node already halted: %v", n, kube.Actions())
	}
}

// TestSkewCheckReusesOneObservationWithinTTL: the nodes of a wave share one
// list of the control plane for controlPlaneTTL: a change within it is not
// seen (the observation is reused), one after it is; a clock that went
// back lists again.
func TestSkewCheckReusesOneObservationWithinTTL(t *testing.T) {
	kube := fake.NewClientset(controlPlane1_28()...)
	now := t0
	s := newSkew(kube, daemonSets(templates1_28()...), &now)
	p := fixture.Policy(t, nil)
	check := func(node string) error { return s.Check(t.Context(), p, node) }

	if err := check("n1"); err != nil {
		t.Fatal(err)
	}
	// istiod 1-28 is removed; within the TTL the observation still shows it.
	if err := kube.Tracker().Delete(deploymentsGR.WithVersion("v1"), "istio-system", "istiod-1-28"); err != nil {
		t.Fatal(err)
	}
	kube.ClearActions()
	now = t0.Add(controlPlaneTTL - time.Millisecond)
	if err := check("n2"); err != nil {
		t.Fatalf("within the TTL: %v; want the first observation reused", err)
	}
	if w, d := lists(kube, "mutatingwebhookconfigurations"), lists(kube, "deployments"); w+d != 0 {
		t.Fatalf("listed %d webhooks and %d deployments within the TTL; want none", w, d)
	}

	// At the TTL it lists again and sees no istiod serving 1-28.
	now = t0.Add(controlPlaneTTL)
	err := check("n3")
	se, halted := haltOf(err)
	if !halted || !strings.Contains(se.Reason, `"1-28", which no istiod serves`) {
		t.Fatalf("past the TTL: %v; want a halt from the new observation", err)
	}
	if w, d := lists(kube, "mutatingwebhookconfigurations"), lists(kube, "deployments"); w != 1 || d != 1 {
		t.Fatalf("past the TTL: %d webhook and %d deployment lists; want one each", w, d)
	}

	// istiod is back; the clock went back a second, before that observation:
	// it is not trusted, the control plane is listed again.
	if err := kube.Tracker().Add(istiod("1-28", "1.28.1")); err != nil {
		t.Fatal(err)
	}
	kube.ClearActions()
	now = t0.Add(controlPlaneTTL - time.Second)
	if err := check("n4"); err != nil {
		t.Fatalf("after the clock went back: %v; want a fresh observation", err)
	}
	if w := lists(kube, "mutatingwebhookconfigurations"); w != 1 {
		t.Fatalf("after the clock went back: %d webhook lists, want 1", w)
	}
}

// TestSkewCheckDoesNotKeepAFailedObservation: a list that failed is not
// reused; the next check within the TTL lists again.
func TestSkewCheckDoesNotKeepAFailedObservation(t *testing.T) {
	kube := fake.NewClientset(controlPlane1_28()...)
	failed := false
	kube.PrependReactor("list", "deployments", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failed {
			return false, nil, nil
		}
		failed = true
		return true, nil, apierrors.NewServerTimeout(deploymentsGR, "list", 1)
	})
	now := t0
	s := newSkew(kube, daemonSets(templates1_28()...), &now)
	p := fixture.Policy(t, nil)
	if err := s.Check(t.Context(), p, "n1"); !apierrors.IsServerTimeout(err) {
		t.Fatalf("first check = %v; want the server timeout", err)
	}
	if err := s.Check(t.Context(), p, "n1"); err != nil {
		t.Fatalf("the retry within the TTL: %v; want a new, successful list", err)
	}
	if d := lists(kube, "deployments"); d != 2 {
		t.Errorf("%d deployment lists; want 2", d)
	}
}

// TestSkewCheckReadsTheSyncedCache: once the control-plane informers have
// synced, preflight reads them and sends no request (the API client here
// would refuse it), halting on a skew the cache shows; before they sync, it
// lists.
func TestSkewCheckReadsTheSyncedCache(t *testing.T) {
	// The watched API: istiod 1-28 at 1.27.3, older than the 1.28 templates.
	watched := fake.NewClientset(istiod("1-28", "1.27.3"), tagWebhook("default", "1-28"))
	cpCache := NewControlPlaneCache(watched, "istio-system")

	kube := fake.NewClientset(controlPlane1_28()...) // what preflight lists while the cache is not synced
	now := t0
	s := newSkew(kube, daemonSets(templates1_28()...), &now)
	s.Cache = cpCache
	p := fixture.Policy(t, nil)

	if err := s.Check(t.Context(), p, "n1"); err != nil {
		t.Fatalf("before the cache synced (listed 1.28.1): %v", err)
	}
	if lists(kube, "mutatingwebhookconfigurations") != 1 || lists(kube, "deployments") != 1 {
		t.Fatalf("before the cache synced, preflight did not list: %v", kube.Actions())
	}

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	cpCache.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), cpCache.Synced) {
		t.Fatal("control-plane cache never synced")
	}
	kube.ClearActions()
	failList(kube, "mutatingwebhookconfigurations", errors.New("no request expected"))
	failList(kube, "deployments", errors.New("no request expected"))
	// Within the TTL of the listed observation, yet the synced cache wins.
	err := s.Check(t.Context(), p, "n2")
	se, halted := haltOf(err)
	if !halted || !strings.Contains(se.Reason, "newer than its control plane 1.27") {
		t.Fatalf("from the synced cache: %v; want a halt on the skew it shows", err)
	}
	if n := len(kube.Actions()); n != 0 {
		t.Errorf("%d API requests with a synced cache: %v", n, kube.Actions())
	}
}

// TestControlPlaneCacheReadErrors: a cache read that fails is an error
// naming what was read, the cause kept, and Check returns it for a retry
// (a cache failure is no RBAC refusal).
func TestControlPlaneCacheReadErrors(t *testing.T) {
	boom := errors.New("indexer closed")
	c := NewControlPlaneCache(fake.NewClientset(), "istio-system")

	tagsFail := *c
	tagsFail.tags = fixture.FailingWebhooks{Err: boom}
	if _, err := tagsFail.observe(t0); !errors.Is(err, boom) || !strings.Contains(err.Error(), "revision tags") {
		t.Errorf("observe with a failing tag cache = %v", err)
	}
	depsFail := *c
	depsFail.deps = fixture.FailingDeployments{Err: boom}
	if _, err := depsFail.observe(t0); !errors.Is(err, boom) || !strings.Contains(err.Error(), "istiod deployments") {
		t.Errorf("observe with a failing deployment cache = %v", err)
	}

	// Through Check, with the informers synced on an empty API.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	c.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.Synced) {
		t.Fatal("control-plane cache never synced")
	}
	c.deps = fixture.FailingDeployments{Err: boom}
	now := t0
	s := newSkew(fake.NewClientset(), daemonSets(templates1_28()...), &now)
	s.Cache = c
	err := s.Check(t.Context(), fixture.Policy(t, nil), "n1")
	if _, halted := haltOf(err); halted || !errors.Is(err, boom) {
		t.Errorf("Check on a failing cache = %v (halt: %v); want the error returned", err, halted)
	}
}

// TestSkewCheckOnlyTheTargetsOfThePolicy: a policy naming one target reads
// and checks that DaemonSet alone (istio-cni is not required to exist).
func TestSkewCheckOnlyTheTargetsOfThePolicy(t *testing.T) {
	kube := fake.NewClientset(controlPlane1_28()...)
	now := t0
	s := newSkew(kube, daemonSets(targetDS("ztunnel", "docker.io/istio/ztunnel:1.27.3", "1-28")), &now)
	p := fixture.Policy(t, func(spec *v1alpha1.NodeRolloutSpec) { spec.Targets = []v1alpha1.TargetRef{fixture.ZtunnelTarget} })
	if err := s.Check(t.Context(), p, "n1"); err != nil {
		t.Fatalf("ztunnel one minor behind, alone: %v", err)
	}
}
