package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/prepull"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/chart"
	"github.com/nodewise/nodewise/test/testkit"
)

// applyChartFence applies, from what `helm template` renders of the chart
// with its defaults, the orchestrator's identity and its fence: every
// ServiceAccount, (Cluster)Role and binding, and every admission policy and
// binding (but the probe's, in its own namespace), and waits until the
// policies are in force. The workloads are left out: the tests run the
// orchestrator in process as that ServiceAccount.
func applyChartFence(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	ctx := context.Background()
	for _, n := range []string{chart.Namespace, cluster.IstioNamespace} {
		if err := chart.EnsureNamespace(ctx, c.Client, n); err != nil {
			t.Fatal(err)
		}
	}
	objs, err := chart.Template(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{"ServiceAccount": true, "ClusterRole": true, "ClusterRoleBinding": true, "Role": true, "RoleBinding": true,
		"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true}
	var fence []string
	keep := objs[:0]
	for _, o := range objs {
		if n := o.GetNamespace(); kinds[o.GetKind()] && (n == "" || n == chart.Namespace || n == cluster.IstioNamespace) {
			keep = append(keep, o)
			if strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy") {
				fence = append(fence, o.GetName())
			}
		}
	}
	for _, want := range []string{"nodewise-prepull-only", "nodewise-prepull-ztunnel", "nodewise-prepull-istio-cni-node", "nodewise-surge-bridge-labelled"} {
		if !strings.Contains(strings.Join(fence, " "), want) {
			t.Fatalf("the chart renders no %s (admission objects: %v)", want, fence)
		}
	}
	if err := chart.Apply(ctx, c.Config, keep); err != nil {
		t.Fatal(err)
	}
	// The policies reach the admission chain within a few seconds: until
	// then the RBAC alone would admit any pod. Wait until each binding
	// refuses a made-up pod of its DaemonSet, and a pod that is neither a
	// bridge nor a pre-pull pod is refused.
	as, err := kubernetes.NewForConfig(asChartOrchestrator(c))
	if err != nil {
		t.Fatal(err)
	}
	probe := func(name string, lbls map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "fence-probe-" + name, Namespace: cluster.IstioNamespace, Labels: lbls},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "docker.io/attacker/rootkit:1"}}}}
	}
	refusals := map[*corev1.Pod]string{
		probe("plain", nil): "the orchestrator may only create surge bridge pods",
	}
	for _, d := range []string{cluster.CNIName, cluster.ZtunnelName} {
		refusals[probe(d, map[string]string{model.LabelPrepull: "x", model.LabelPrepullTarget: d})] = "with binding 'nodewise-prepull-" + d + "' denied"
	}
	zero := int64(0)
	testkit.WaitFor(t, 2*time.Minute, "the chart's admission policies in force", func() (bool, error) {
		for p, want := range refusals {
			_, err := as.CoreV1().Pods(cluster.IstioNamespace).Create(ctx, p, metav1.CreateOptions{})
			if err == nil {
				_ = c.Client.CoreV1().Pods(cluster.IstioNamespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
			}
			if err == nil || !strings.Contains(err.Error(), want) {
				return false, fmt.Errorf("pod %s: %v, want refused: %s", p.Name, err, want)
			}
		}
		return true, nil
	})
}

// asChartOrchestrator is the rest config of the chart's orchestrator
// ServiceAccount (impersonated, with its groups).
func asChartOrchestrator(c *cluster.Cluster) *rest.Config {
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + chart.Namespace + ":nodewise-orchestrator",
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + chart.Namespace, "system:authenticated"}}
	return cfg
}

// targetView is a target DaemonSet as the orchestrator's cache reads it for
// a pre-pull (its template's images and pull secrets).
func (e *env) targetView(name string) model.TargetView {
	e.t.Helper()
	ds, err := e.c.Client.AppsV1().DaemonSets(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	tv := model.TargetView{Ref: v1alpha1.TargetRef{Namespace: ns, Name: name}, Found: true, ImagePullSecrets: ds.Spec.Template.Spec.ImagePullSecrets}
	for _, c := range ds.Spec.Template.Spec.Containers {
		tv.Images = append(tv.Images, c.Image)
	}
	return tv
}

// TestPrepullPolicyFencesOrchestratorPods: with the chart's RBAC and
// admission policies, the orchestrator's ServiceAccount may create the
// pre-pull pods the orchestrator builds (one per target, each checked against
// its own DaemonSet's template), and nothing that differs from them in a way
// that would run or hold anything: each variant is refused with the message
// of the rule it breaks. A pod that is neither a bridge nor a pre-pull pod
// is still refused, and everyone else's pods are not matched.
func TestPrepullPolicyFencesOrchestratorPods(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1, 1)
	applyChartFence(t, e.c)
	ctx := context.Background()
	as, err := kubernetes.NewForConfig(asChartOrchestrator(e.c))
	if err != nil {
		t.Fatal(err)
	}
	nr := rollout("fence", func(s *v1alpha1.NodeRolloutSpec) { s.Prepull = true })
	e.apply(nr)
	nr, err = e.rollouts.Get(ctx, nr.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	zt, cni := e.targetView(cluster.ZtunnelName), e.targetView(cluster.CNIName)
	const node = "node-001"
	variant := func(name string, tv model.TargetView, change func(*corev1.Pod)) *corev1.Pod {
		p := prepull.Pod(nr, node, tv)
		p.Name += "-" + name
		change(p)
		return p
	}
	zero := int64(0)
	del := metav1.DeleteOptions{GracePeriodSeconds: &zero}
	pods := as.CoreV1().Pods(ns)
	const (
		owned     = "labelled nodewise.io/prepull with the NodeRollout that owns it"
		images    = "may only pull the images of DaemonSet ztunnel's template"
		runs      = "a pre-pull pod runs nothing"
		holds     = "a pre-pull pod holds nothing"
		privilege = "a pre-pull pod gets no privilege"
		bound     = "a pre-pull pod is bound to its node"
		labelled  = "the orchestrator may only create surge bridge pods (label nodewise.io/surge-bridge naming ztunnel) and pre-pull pods"
	)
	yes := true
	hostPath := corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}
	cases := []struct {
		what, want string
		pod        *corev1.Pod
	}{
		{"an image not in the template", images, variant("image", zt, func(p *corev1.Pod) { p.Spec.Containers[0].Image = "docker.io/attacker/rootkit:1" })},
		{"istio-cni's image in ztunnel's pod", images, variant("cniimage", zt, func(p *corev1.Pod) { p.Spec.Containers[0].Image = cni.Images[0] })},
		{"another command", runs, variant("command", zt, func(p *corev1.Pod) { p.Spec.Containers[0].Command = []string{"/bin/sh", "-c", "id"} })},
		{"args", runs, variant("args", zt, func(p *corev1.Pod) { p.Spec.Containers[0].Args = []string{"-c", "id"} })},
		{"an init container", runs, variant("init", zt, func(p *corev1.Pod) {
			c := p.Spec.Containers[0]
			c.Name = "init"
			p.Spec.InitContainers = []corev1.Container{c}
		})},
		{"a hostPath volume", holds, variant("hostpath", zt, func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "host", VolumeSource: hostPath}}
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "host", MountPath: "/host"}}
		})},
		{"the ServiceAccount token", holds, variant("token", zt, func(p *corev1.Pod) { p.Spec.AutomountServiceAccountToken = nil })},
		{"ztunnel's ServiceAccount", holds, variant("sa", zt, func(p *corev1.Pod) { p.Spec.ServiceAccountName = "ztunnel" })},
		{"hostNetwork", privilege, variant("hostnet", zt, func(p *corev1.Pod) { p.Spec.HostNetwork = true })},
		{"hostPID", privilege, variant("hostpid", zt, func(p *corev1.Pod) { p.Spec.HostPID = true })},
		{"privileged", privilege, variant("privileged", zt, func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: &yes}
		})},
		{"a capability", privilege, variant("caps", zt, func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}}}
		})},
		{"a pod securityContext (sysctls)", privilege, variant("sysctl", zt, func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{Sysctls: []corev1.Sysctl{{Name: "net.ipv4.ip_unprivileged_port_start", Value: "0"}}}
		})},
		{"no nodeName", bound, variant("unbound", zt, func(p *corev1.Pod) { p.Spec.NodeName = "" })},
		{"restarts", bound, variant("restarts", zt, func(p *corev1.Pod) { p.Spec.RestartPolicy = corev1.RestartPolicyOnFailure })},
		{"a Pod for owner", owned, variant("owner", zt, func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: "x", UID: "x"}}
		})},
		{"no nodewise.io/prepull label", owned, variant("unlabelled", zt, func(p *corev1.Pod) { delete(p.Labels, model.LabelPrepull) })},
		{"a target with no binding", labelled, variant("kubeproxy", zt, func(p *corev1.Pod) { p.Labels[model.LabelPrepullTarget] = "kube-proxy" })},
		{"no label at all", labelled, variant("plain", zt, func(p *corev1.Pod) { p.Labels = nil })},
	}
	for _, tc := range cases {
		made, err := pods.Create(ctx, tc.pod, metav1.CreateOptions{})
		if err == nil {
			t.Errorf("a pre-pull pod with %s was admitted; want refused: %q", tc.what, tc.want)
			_ = e.c.Client.CoreV1().Pods(ns).Delete(ctx, made.Name, del)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("a pre-pull pod with %s: %v; want refused: %q", tc.what, err, tc.want)
		}
	}
	// The orchestrator's own pods are admitted, one per target, and it
	// deletes them (the Role nodewise-orchestrator-dataplane).
	for _, tv := range []model.TargetView{zt, cni} {
		p := prepull.Pod(nr, node, tv)
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Errorf("the orchestrator's pre-pull pod for %s: %v", tv.Ref.Name, err)
			continue
		}
		if err := pods.Delete(ctx, p.Name, del); err != nil {
			t.Errorf("the orchestrator deleting its pre-pull pod %s: %v", p.Name, err)
		}
	}
	// Anyone else's pod, pre-pull-shaped with a foreign image or not, is not matched.
	other := variant("admin", zt, func(p *corev1.Pod) { p.Spec.Containers[0].Image = "docker.io/library/busybox:1" })
	if _, err := e.c.Client.CoreV1().Pods(ns).Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Errorf("the admin's pod labelled as a pre-pull pod: %v; the fence is the orchestrator's only", err)
	}
}

// TestPrepullUnderChartFence: the orchestrator, acting as the chart's
// ServiceAccount under the chart's RBAC and admission policies, pre-pulls
// every node (one pod per target, each admitted) and then swaps it.
func TestPrepullUnderChartFence(t *testing.T) {
	t.Parallel()
	const nodes = 2
	e := newEnv(t, nodes, 1)
	applyChartFence(t, e.c)
	created := e.watchPrepullPods()
	e.upgrade("1.28.1")
	e.apply(rollout("prepull-chart", func(s *v1alpha1.NodeRolloutSpec) {
		s.MaxParallel, s.MaxUnavailable = intstr.FromInt32(2), intstr.FromInt32(2)
		s.Prepull = true
	}))
	e.runInProcessWith("as-sa", func(c *orchestrator.Config) { c.RESTConfig, c.Namespace = asChartOrchestrator(e.c), chart.Namespace })
	nr := e.waitPhase("prepull-chart", 3*time.Minute, v1alpha1.PhaseHalted, v1alpha1.PhaseCompleted)
	if nr.Status.Phase != v1alpha1.PhaseCompleted {
		t.Fatalf("phase %s: %s", nr.Status.Phase, nr.Status.HaltReason)
	}
	e.assertAllOnNewest(nodes)
	got := created()
	for n := 1; n <= nodes; n++ {
		for _, target := range []string{cluster.CNIName, cluster.ZtunnelName} {
			node := fmt.Sprintf("node-%03d", n)
			if !got[node+"/"+target] {
				t.Errorf("no pre-pull pod for %s was created on %s (created: %v)", target, node, got)
			}
		}
	}
}

// watchPrepullPods records, until the test ends, every pre-pull pod created
// in the Istio namespace as node/target; the returned func reads the record.
func (e *env) watchPrepullPods() func() map[string]bool {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e.t.Cleanup(cancel)
	w, err := e.c.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: model.LabelPrepull})
	if err != nil {
		e.t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	go func() {
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Added {
				mu.Lock()
				seen[p.Spec.NodeName+"/"+p.Labels[model.LabelPrepullTarget]] = true
				mu.Unlock()
			}
		}
	}()
	return func() map[string]bool {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]bool{}
		for k := range seen {
			out[k] = true
		}
		return out
	}
}
