package e2e

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodewise/nodewise/orchestrator/swap"
)

// TestSurgePolicyComparesTheWholePodSpec: the surge policy refuses, from the
// orchestrator, a bridge that differs from the ztunnel DaemonSet's template
// in any field nodewise does not set: each case changes one field a stolen
// token would use to start a ztunnel-identity pod elsewhere (another CA or
// XDS address in env, a host path mounted, host IPC, ...). The real bridge
// still passes.
func TestSurgePolicyComparesTheWholePodSpec(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, 1)
	applyDeploy(t, e.c)
	ctx := context.Background()
	cfg := rest.CopyConfig(e.c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:nodewise-system:nodewise-orchestrator", Groups: []string{"system:serviceaccounts", "system:authenticated"}}
	as, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	in, err := swap.ObserveSurge(ctx, e.c.Client, ztunnelRef, "node-001")
	if err != nil {
		t.Fatal(err)
	}
	pods := as.CoreV1().Pods(ns)
	anchor := e.ztunnelPod("node-001")
	bridge := func(name string, change func(*corev1.PodSpec)) *corev1.Pod {
		p := swap.BridgePod(in.DaemonSet, in.Revision, "node-001", anchor)
		p.Name += "-" + name
		change(&p.Spec)
		return p
	}
	hostPath := corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}
	cases := map[string]*corev1.Pod{
		"an env var (another CA address)": bridge("env", func(s *corev1.PodSpec) {
			s.Containers[0].Env = append(s.Containers[0].Env, corev1.EnvVar{Name: "CA_ADDRESS", Value: "evil.example:15012"})
		}),
		"envFrom": bridge("envfrom", func(s *corev1.PodSpec) {
			s.Containers[0].EnvFrom = append(s.Containers[0].EnvFrom, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "evil"}}})
		}),
		"a host path volume and its mount": bridge("mount", func(s *corev1.PodSpec) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "evil", VolumeSource: hostPath})
			s.Containers[0].VolumeMounts = append(s.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "evil", MountPath: "/host"})
		}),
		"a port": bridge("port", func(s *corev1.PodSpec) {
			s.Containers[0].Ports = append(s.Containers[0].Ports, corev1.ContainerPort{Name: "evil", ContainerPort: 4444})
		}),
		"hostIPC": bridge("hostipc", func(s *corev1.PodSpec) { s.HostIPC = true }),
		"the pod securityContext": bridge("podsc", func(s *corev1.PodSpec) {
			root := int64(0)
			s.SecurityContext = &corev1.PodSecurityContext{RunAsUser: &root}
		}),
		"an init container": bridge("init", func(s *corev1.PodSpec) {
			s.InitContainers = append(s.InitContainers, corev1.Container{Name: "evil", Image: s.Containers[0].Image, Command: []string{"sh", "-c", "id"}})
		}),
		"a host path named kube-api-access-": bridge("apiaccess", func(s *corev1.PodSpec) {
			s.Volumes = append(s.Volumes, corev1.Volume{Name: "kube-api-access-evil", VolumeSource: hostPath})
			s.Containers[0].VolumeMounts = append(s.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "kube-api-access-evil", MountPath: "/host"})
		}),
		"another readiness probe": bridge("probe", func(s *corev1.PodSpec) { s.Containers[0].ReadinessProbe = nil }),
	}
	// The policy reaches the admission chain within a few seconds: wait
	// for the first refusal, then every case must be refused.
	first := bridge("image", func(s *corev1.PodSpec) { s.Containers[0].Image = "docker.io/attacker/rootkit:1" })
	e.waitFor(func(ctx context.Context) bool {
		made, err := pods.Create(ctx, first, metav1.CreateOptions{})
		if err == nil {
			zero := int64(0)
			_ = e.c.Client.CoreV1().Pods(ns).Delete(ctx, made.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		}
		return err != nil && strings.Contains(err.Error(), "copy of the ztunnel DaemonSet")
	}, "the policy to refuse a bridge with another image")
	for what, p := range cases {
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err == nil || !strings.Contains(err.Error(), "copy of the ztunnel DaemonSet") {
			t.Errorf("a bridge with %s: %v; want refused by the policy", what, err)
			zero := int64(0)
			_ = e.c.Client.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		}
	}
	if _, err := pods.Create(ctx, swap.BridgePod(in.DaemonSet, in.Revision, "node-001", anchor), metav1.CreateOptions{}); err != nil {
		t.Errorf("the real bridge as the orchestrator: %v", err)
	}
}
