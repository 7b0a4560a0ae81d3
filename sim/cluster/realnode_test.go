package cluster

import (
	"context"
	"net"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestRealNodeRunsProbeImage joins a real kubelet (containerd, runc, the
// bridge CNI) to the cluster and runs the probe from its FROM scratch image
// there with the chart's securityContext (non-root 65532, no capabilities,
// read-only root): Running, and Ready through its own readiness probe.
func TestRealNodeRunsProbeImage(t *testing.T) {
	c := Start(t, Options{Nodes: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := filepath.Dir(imagesDir())
	n := startRealNode(t, ctx, c, bin, nil)
	ref, err := n.Containerd.Import(ctx, filepath.Join(bin, "images", "probe.tar"))
	if err != nil {
		t.Fatal(err)
	}
	no, yes, uid := false, true, int64(65532)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:                     n.Name,
			Tolerations:                  []corev1.Toleration{{Key: TaintRealNode, Operator: corev1.TolerationOpExists}},
			AutomountServiceAccountToken: &no,
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "probe", Image: ref, ImagePullPolicy: corev1.PullNever,
				Args:           []string{"--port=15080", "--peers=localhost", "--rate=1"},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(15080)}}},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &no, ReadOnlyRootFilesystem: &yes,
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
			}},
		},
	}
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	err = wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		got, err = c.Client.CoreV1().Pods("default").Get(ctx, "probe", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the probe pod on the real node never became Ready: %v; status %+v", err, got.Status)
	}
	if _, cidr, _ := net.ParseCIDR(n.PodCIDR); !cidr.Contains(net.ParseIP(got.Status.PodIP)) {
		t.Errorf("pod IP %q, want one from the bridge CNI's %s", got.Status.PodIP, n.PodCIDR)
	}
	if cs := got.Status.ContainerStatuses; len(cs) != 1 || cs[0].State.Running == nil || cs[0].ImageID == "" {
		t.Errorf("container statuses %+v, want the probe running from its image", cs)
	}
	// Deleted through the API, the kubelet stops it: the real lifecycle.
	one := int64(1)
	if err := c.Client.CoreV1().Pods("default").Delete(ctx, "probe", metav1.DeleteOptions{GracePeriodSeconds: &one}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextCancel(ctx, 500*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().Pods("default").Get(ctx, "probe", metav1.GetOptions{})
		return err != nil, nil
	})
	if err != nil {
		t.Errorf("the probe pod was not removed by the real kubelet: %v", err)
	}
}

// startRealNode joins real-001 to c, with mirrors its containerd pulls
// through (RealNodeOptions.RegistryMirrors), stopped when the test ends (with
// the kubelet's log when it failed).
func startRealNode(t *testing.T, ctx context.Context, c *Cluster, bin string, mirrors map[string]string) *RealNode {
	t.Helper()
	n, err := c.StartRealNode(ctx, t.TempDir(), RealNodeOptions{Name: "real-001", BinDir: bin, RegistryMirrors: mirrors})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("--- tail of the kubelet log:\n%s", tail(n.KubeletLog(), 30))
		}
		n.Stop()
	})
	return n
}
