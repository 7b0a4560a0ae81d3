package cluster

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestIstiodEnvIsTheChartsLiterals: pilot-discovery gets the literal
// environment of the chart's discovery container, its own pod's identity in
// place of the downward API, and no KUBECONFIG (the chart's names a remote
// cluster's mounted secret, which would override --kubeconfig).
func TestIstiodEnvIsTheChartsLiterals(t *testing.T) {
	dep := unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "istiod-1-28", "namespace": "istio-system"},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{
			map[string]any{"name": "other", "env": []any{map[string]any{"name": "NOT_MINE", "value": "x"}}},
			map[string]any{"name": "discovery", "env": []any{
				map[string]any{"name": "REVISION", "value": "1-28"},
				map[string]any{"name": "POD_NAME", "valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "metadata.name"}}},
				map[string]any{"name": "KUBECONFIG", "value": "/var/run/secrets/remote/config"},
				map[string]any{"name": "INJECTION_WEBHOOK_CONFIG_NAME", "value": "istio-sidecar-injector-1-28"},
				map[string]any{"name": "EMPTY", "value": ""},
			}},
		}}}},
	}}
	other := dep.DeepCopy()
	other.SetName("istiod-1-29")
	env, err := istiodEnv([]unstructured.Unstructured{*other, dep}, "1-28")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"POD_NAME=istiod-1-28-local", "POD_NAMESPACE=istio-system", "SERVICE_ACCOUNT=istiod-1-28",
		"REVISION=1-28", "INJECTION_WEBHOOK_CONFIG_NAME=istio-sidecar-injector-1-28", "EMPTY="}
	if !slices.Equal(env, want) {
		t.Fatalf("env %q, want %q", env, want)
	}
	if _, err := istiodEnv([]unstructured.Unstructured{*other}, "1-28"); err == nil {
		t.Fatal("no error when the chart rendered no istiod-1-28 Deployment")
	}
}

// TestNativeSidecarRunsBesideTheContainers: an init container with
// restartPolicy Always (istiod injects istio-proxy so) is reported Running
// and Ready, as a kubelet does, and a sidecar that never gets Ready keeps
// its pod from Ready; a plain init container has Completed.
func TestNativeSidecarRunsBesideTheContainers(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	pod := func(proxyTag string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", UID: "u1"}, Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{
				{Name: "istio-init", Image: "docker.io/istio/proxyv2:1.28.1"},
				{Name: "istio-proxy", Image: "docker.io/istio/proxyv2:" + proxyTag, RestartPolicy: &always},
			},
			Containers: []corev1.Container{{Name: "web", Image: "docker.io/nodewise/sample-web:1.0"}},
		}}
	}
	node := &NodeSpec{Name: "node-001", IP: "127.1.0.1"}
	st := runningStatus(pod("1.28.1"), node, "198.18.0.5", time.Now())
	if len(st.InitContainerStatuses) != 2 || st.InitContainerStatuses[0].State.Terminated == nil {
		t.Fatalf("istio-init: %+v, want Completed", st.InitContainerStatuses)
	}
	proxy := st.InitContainerStatuses[1]
	if proxy.State.Running == nil || !proxy.Ready || proxy.Started == nil || !*proxy.Started {
		t.Fatalf("native sidecar istio-proxy: %+v, want Running, Started and Ready", proxy)
	}
	if !podReady(&corev1.Pod{Status: *st}) {
		t.Fatal("pod with a Ready native sidecar not Ready")
	}
	if st := runningStatus(pod("1.28.1"+TagNeverReady), node, "198.18.0.5", time.Now()); podReady(&corev1.Pod{Status: *st}) {
		t.Fatal("pod Ready while its native sidecar never is")
	}
}
