package testkit

import (
	"context"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// JobPod waits for a Running pod of the Job (the simulated kubelet's doing)
// and returns it.
func JobPod(t testing.TB, ctx context.Context, kube kubernetes.Interface, ns, job string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	WaitFor(t, 30*time.Second, "a Running pod of Job "+ns+"/"+job, func() (bool, error) {
		pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + job})
		if err != nil {
			return false, err
		}
		for i := range pods.Items {
			if p := &pods.Items[i]; p.Status.Phase == corev1.PodRunning {
				pod = p
				return true, nil
			}
		}
		return false, fmt.Errorf("%d pods", len(pods.Items))
	})
	return pod
}

// FinishJobPod acts as the kubelet, which the simulated nodes' is not for
// containers: the Job's Running pod's containers exit (0 for Succeeded, 1
// for Failed) through pods/status, and the job controller judges the Job
// from that.
func FinishJobPod(t testing.TB, ctx context.Context, kube kubernetes.Interface, ns, job string, phase corev1.PodPhase) {
	t.Helper()
	pod := JobPod(t, ctx, kube, ns, job)
	code := int32(0)
	if phase == corev1.PodFailed {
		code = 1
	}
	now := metav1.Now()
	pod.Status.Phase = phase
	for i := range pod.Status.ContainerStatuses {
		cs := &pod.Status.ContainerStatuses[i]
		cs.Ready, cs.State = false, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: "Completed", StartedAt: now, FinishedAt: now}}
	}
	for i := range pod.Status.Conditions {
		if c := &pod.Status.Conditions[i]; c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
			c.Status = corev1.ConditionFalse
		}
	}
	if _, err := kube.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("finishing pod %s: %v", pod.Name, err)
	}
}

// ConformanceJob is a conformance gate's Job template for the tests: one
// container, no retries, admitted under PodSecurity restricted (the
// controllers' namespace enforces it).
func ConformanceJob() batchv1.JobTemplateSpec {
	no, yes, zero := false, true, int32(0)
	return batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{BackoffLimit: &zero, Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		RestartPolicy:   corev1.RestartPolicyNever,
		SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &yes, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
		Containers: []corev1.Container{{Name: "suite", Image: "docker.io/nodewise/conformance:1.0", SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: &no, Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
	}}}}
}
