package worker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
	"github.com/nodewise/nodewise/orchestrator/observe"
)

// agentCNI answers as a node agent would, and records the version asked.
type agentCNI struct {
	h     wire.CNIHealth
	err   error
	asked []string
}

func (a *agentCNI) CNI(_ context.Context, node, version string) (wire.CNIHealth, error) {
	a.asked = append(a.asked, version)
	h := a.h
	h.Node = node
	return h, a.err
}

func cniWorker(t *testing.T, a *agentCNI, image string) cniCheck {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "istio-cni-node-abc", Namespace: "istio-system", CreationTimestamp: metav1.NewTime(time.Unix(100, 0)),
			OwnerReferences: []metav1.OwnerReference{{Kind: "DaemonSet", Name: "istio-cni-node"}}},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "install-cni", Image: image}}},
	}
	if err := idx.Add(pod); err != nil {
		t.Fatal(err)
	}
	return cniCheck{agents: a, pods: observe.PodCache{PodLister: corelisters.NewPodLister(idx)}}
}

var cniPolicy = model.Policy{Targets: []v1alpha1.TargetRef{
	{Namespace: "istio-system", Name: "istio-cni-node", Kind: v1alpha1.TargetCNI},
	{Namespace: "istio-system", Name: "ztunnel", Kind: v1alpha1.TargetZtunnel},
}}

var badToken = wire.CNIHealth{Checks: []wire.CNICheck{
	{Check: wire.CNICheckConfig, File: "/etc/cni/net.d/10-calico.conflist", OK: true, Detail: "chained"},
	{Check: wire.CNICheckToken, File: "/etc/cni/net.d/ZZZ-istio-cni-kubeconfig", Detail: "the API server refused the token"},
}}

// TestCNIAfterSwapFailsAPassingVerdict: a traffic Pass with istio-cni's
// token refused is a Fail whose headline names the check and the file, and
// whose reasons name the node and the path and keep what the gate alone
// said; a healthy check is reported in a Pass.
func TestCNIAfterSwapFailsAPassingVerdict(t *testing.T) {
	a := &agentCNI{h: badToken}
	w := cniWorker(t, a, "docker.io/istio/install-cni:1.28.1-distroless")
	v := w.cniAfterSwap(context.Background(), cniPolicy, "n1", health.Verdict{Outcome: health.Pass, Headline: "no regression", Reasons: []string{"12 pods judged"}})
	if want := "Fail: istio-cni check token failed on ZZZ-istio-cni-kubeconfig: the API server refused the token"; v.Line() != want {
		t.Errorf("line %q, want %q", v.Line(), want)
	}
	if got := strings.Join(v.Reasons, "; "); !strings.Contains(got, "istio-cni on node n1: check token failed on /etc/cni/net.d/ZZZ-istio-cni-kubeconfig") ||
		!strings.Contains(got, "(the gate alone said: Pass: no regression); 12 pods judged") {
		t.Errorf("reasons %s", got)
	}
	if len(a.asked) != 1 || a.asked[0] != "1.28.1" {
		t.Errorf("asked for versions %q, want the pod's tag without -distroless", a.asked)
	}

	a.h = wire.CNIHealth{Checks: []wire.CNICheck{{Check: wire.CNICheckPlugin, File: "/opt/cni/bin/istio-cni", OK: true, Detail: "version 1.28.1"}}}
	v = w.cniAfterSwap(context.Background(), cniPolicy, "n1", health.Verdict{Outcome: health.Pass})
	if v.Outcome != health.Pass || !strings.Contains(strings.Join(v.Reasons, "; "), "plugin ok (/opt/cni/bin/istio-cni: version 1.28.1)") {
		t.Errorf("healthy: %s %q", v.Line(), v.Reasons)
	}

	// A rollout without an istio-cni target is not checked.
	ztOnly := model.Policy{Targets: cniPolicy.Targets[1:]}
	a.h, a.asked = badToken, nil
	if v := w.cniAfterSwap(context.Background(), ztOnly, "n1", health.Verdict{Outcome: health.Pass}); v.Outcome != health.Pass || len(a.asked) != 0 {
		t.Errorf("ztunnel-only rollout: %s, asked %q", v.Line(), a.asked)
	}
}

// TestCNIBeforeCordonHalts: a failed check, or an agent that does not
// answer, halts the node in preflight (before the cordon), naming it.
func TestCNIBeforeCordonHalts(t *testing.T) {
	a := &agentCNI{h: badToken}
	w := cniWorker(t, a, "docker.io/istio/install-cni:1.27.3")
	err := w.cniBeforeCordon(context.Background(), cniPolicy, "n1")
	var se *nodestep.StepError
	if !errors.As(err, &se) || se.Halt != nodestep.HaltPreflightFailed || !strings.Contains(se.Reason, "check token failed on /etc/cni/net.d/ZZZ-istio-cni-kubeconfig") {
		t.Fatalf("want a preflight halt naming the file, got %v", err)
	}
	a.err = errors.New("node agent unavailable: connection refused")
	err = w.cniBeforeCordon(context.Background(), cniPolicy, "n1")
	if !errors.As(err, &se) || !strings.Contains(se.Reason, "istio-cni on node n1 cannot be checked") {
		t.Fatalf("a silent agent must halt (fail closed), got %v", err)
	}
	a.err, a.h = nil, wire.CNIHealth{Checks: []wire.CNICheck{{Check: wire.CNICheckConfig, File: "f", OK: true}}}
	if err := w.cniBeforeCordon(context.Background(), cniPolicy, "n1"); err != nil {
		t.Fatalf("healthy: %v", err)
	}
}

func TestImageVersion(t *testing.T) {
	for image, want := range map[string]string{
		"docker.io/istio/install-cni:1.28.1":               "1.28.1",
		"docker.io/istio/install-cni:1.28.1-distroless":    "1.28.1",
		"localhost:5000/istio/install-cni:1.28.2-badtoken": "1.28.2-badtoken",
		"localhost:5000/istio/install-cni":                 "",
		"docker.io/istio/install-cni@sha256:abcd":          "",
	} {
		if got := imageVersion(image); got != want {
			t.Errorf("imageVersion(%s) = %q, want %q", image, got, want)
		}
	}
}
