package cluster

import (
	"testing"
	"time"

	"k8s.io/kubectl/pkg/util/podutils"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// A DaemonSet gets exactly one Running and Ready pod on each of 20 nodes in 3
// zones, every one placed by the real kube-scheduler.
func TestDaemonSetOnePodPerNode(t *testing.T) {
	c := Start(t, Options{Nodes: 20, Zones: 3})
	ctx := testContext(t, 3*time.Minute)

	zones := map[string]int{}
	for _, n := range c.Nodes {
		zones[n.Zone]++
	}
	if len(zones) != 3 || zones["zone-a"] != 7 || zones["zone-b"] != 7 || zones["zone-c"] != 6 {
		t.Fatalf("nodes spread over zones %v, want 7/7/6 over zone-a..c", zones)
	}
	createNamespace(t, ctx, c.Client, "agents")
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "agents"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "agent"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "agent", Image: "example/agent:1.0"}}},
			},
		},
	}
	if _, err := c.Client.AppsV1().DaemonSets("agents").Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := waitPods(t, ctx, c.Client, "agents", "app=agent", func(pods []corev1.Pod) bool {
		ready := 0
		for i := range pods {
			if podutils.IsPodReady(&pods[i]) {
				ready++
			}
		}
		return ready >= 20
	})
	time.Sleep(2 * time.Second) // a 21st pod, if the controller made one, would show up by now
	pods = waitPods(t, ctx, c.Client, "agents", "app=agent", func([]corev1.Pod) bool { return true })
	if len(pods) != 20 {
		t.Fatalf("got %d pods, want exactly 20", len(pods))
	}
	perNode := map[string]int{}
	ips := map[string]bool{}
	for _, p := range pods {
		perNode[p.Spec.NodeName]++
		if p.Status.Phase != corev1.PodRunning || !podutils.IsPodReady(&p) || p.Status.PodIP == "" || ips[p.Status.PodIP] {
			t.Errorf("pod %s: phase %s ready %t ip %q (duplicate %t)", p.Name, p.Status.Phase, podutils.IsPodReady(&p), p.Status.PodIP, ips[p.Status.PodIP])
		}
		ips[p.Status.PodIP] = true
		if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].Image != "example/agent:1.0" {
			t.Errorf("pod %s container statuses %+v", p.Name, p.Status.ContainerStatuses)
		}
	}
	for _, n := range c.Nodes {
		if perNode[n.Name] != 1 {
			t.Errorf("node %s has %d agent pods, want 1", n.Name, perNode[n.Name])
		}
	}
	// Every pod's Scheduled event comes from the real scheduler.
	events, err := c.Client.CoreV1().Events("agents").List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("reason", "Scheduled").String()})
	if err != nil {
		t.Fatal(err)
	}
	scheduled := map[string]bool{}
	for _, e := range events.Items {
		if e.ReportingController == "default-scheduler" || e.Source.Component == "default-scheduler" {
			scheduled[e.InvolvedObject.Name] = true
		}
	}
	for _, p := range pods {
		if !scheduled[p.Name] {
			t.Errorf("pod %s has no Scheduled event from default-scheduler", p.Name)
		}
	}
}
