package chart

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/sim/cluster"
)

// podSecurityValues are the value sets TestChartPodSecurityAdmitted renders
// the chart with (each with createNamespace=true, so the release namespace
// is the chart's too): the defaults (clusterSize=large), the other size
// presets, and every value that changes what a pod may do.
var podSecurityValues = [][]string{
	nil,
	{"clusterSize=small"},
	{"clusterSize=medium"},
	{"agent.mesh=off"},
	{"agent.mode=proc"},
	{"judge.enabled=false"},
	{"dashboard.enabled=true"},
}

// enforceLabel is the Pod Security admission label whose level the API
// server refuses pods above.
const enforceLabel = "pod-security.kubernetes.io/enforce"

// wantLevel is the Pod Security level each namespace the chart creates
// must declare: the agents' privileged, everything else restricted.
func wantLevel(ns string) string {
	if ns == AgentNamespace {
		return "privileged"
	}
	return "restricted"
}

// podTemplate is the pod a Pod-bearing object makes (nil for any other
// object): its template's metadata and spec, in the object's namespace.
func podTemplate(t *testing.T, o *unstructured.Unstructured) *corev1.Pod {
	t.Helper()
	var path []string
	switch o.GetKind() {
	case "Pod":
	case "Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job", "ReplicationController":
		path = []string{"spec", "template"}
	case "CronJob":
		path = []string{"spec", "jobTemplate", "spec", "template"}
	default:
		return nil
	}
	obj := o.Object
	if len(path) > 0 {
		m, ok, err := unstructured.NestedMap(o.Object, path...)
		if err != nil || !ok {
			t.Fatalf("%s has no pod template at %s: %v", Key(o), strings.Join(path, "."), err)
		}
		obj = m
	}
	var pod corev1.Pod
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &pod); err != nil {
		t.Fatalf("%s: pod template: %v", Key(o), err)
	}
	pod.TypeMeta = metav1.TypeMeta{}
	pod.ObjectMeta = metav1.ObjectMeta{
		GenerateName: strings.ToLower(o.GetKind()) + "-" + o.GetName() + "-",
		Namespace:    o.GetNamespace(),
		Labels:       pod.Labels,
		Annotations:  pod.Annotations,
	}
	return &pod
}

// dryRunPod creates pod as a server-side dry run: every admission plugin
// runs, Pod Security's enforce among them, and nothing is stored.
func dryRunPod(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod) error {
	_, err := kube.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	return err
}

// TestChartPodSecurityAdmitted: every namespace the chart puts a pod in is
// the chart's own and declares its Pod Security level (the agents'
// privileged, the rest restricted), and the real kube-apiserver's Pod
// Security admission admits every pod the chart renders (each workload's
// template, the helm test pod) at that level, under each value set of
// podSecurityValues. A template above its namespace's level is refused: an
// orchestrator granted NET_ADMIN, and an agent moved into the restricted
// release namespace.
func TestChartPodSecurityAdmitted(t *testing.T) {
	t.Parallel()
	c := cluster.Start(t, cluster.Options{Nodes: 1})
	ctx := context.Background()
	var orchestrator, agent *corev1.Pod
	for _, set := range podSecurityValues {
		t.Run(fmt.Sprintf("%v", set), func(t *testing.T) {
			objs, err := Template(ctx, append([]string{"createNamespace=true"}, set...)...)
			if err != nil {
				t.Fatal(err)
			}
			levels := map[string]string{}
			var namespaces, accounts, pods []*unstructured.Unstructured
			for _, o := range objs {
				switch o.GetKind() {
				case "Namespace":
					levels[o.GetName()] = o.GetLabels()[enforceLabel]
					namespaces = append(namespaces, o)
				case "ServiceAccount":
					accounts = append(accounts, o) // the ServiceAccount admission plugin wants a pod's account to exist
				}
				if podTemplate(t, o) != nil {
					pods = append(pods, o)
				}
			}
			for ns, level := range levels {
				if ns == cluster.IstioNamespace {
					continue // Istio's, rendered only with createIstioNamespace
				}
				if want := wantLevel(ns); level != want {
					t.Errorf("namespace %s declares Pod Security level %q, want %q", ns, level, want)
				}
			}
			if err := Apply(ctx, c.Config, append(namespaces, accounts...)); err != nil {
				t.Fatal(err)
			}
			if len(pods) < 4 {
				t.Fatalf("only %d Pod-bearing objects rendered", len(pods))
			}
			for _, o := range pods {
				pod := podTemplate(t, o)
				level, ok := levels[pod.Namespace]
				if !ok || level == "" {
					t.Errorf("%s runs pods in namespace %s, which the chart does not create with a Pod Security level", Key(o), pod.Namespace)
					continue
				}
				if err := dryRunPod(ctx, c.Client, pod); err != nil {
					t.Errorf("%s: its pod is refused in %s (level %s): %v", Key(o), pod.Namespace, level, err)
				}
				switch o.GetName() {
				case "nodewise-orchestrator":
					orchestrator = pod
				case "nodewise-agent":
					agent = pod
				}
			}
		})
	}
	if orchestrator == nil || agent == nil {
		t.Fatal("the chart rendered no orchestrator or no agent")
	}

	// The test's own copies, above their namespace's level, are refused.
	refused := func(what string, pod *corev1.Pod) {
		t.Helper()
		err := dryRunPod(ctx, c.Client, pod)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `violates PodSecurity "restricted`) {
			t.Errorf("%s: want Pod Security's refusal at restricted, got %v", what, err)
		}
	}
	withCap := orchestrator.DeepCopy()
	sc := withCap.Spec.Containers[0].SecurityContext
	sc.Capabilities.Add = append(sc.Capabilities.Add, "NET_ADMIN")
	refused("an orchestrator with NET_ADMIN", withCap)
	moved := agent.DeepCopy()
	moved.Namespace = Namespace
	if _, err := c.Client.CoreV1().ServiceAccounts(Namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: moved.Spec.ServiceAccountName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	refused("the agent in the release namespace", moved)
}
