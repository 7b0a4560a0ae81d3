package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/nodeagent"
)

// istioCNIBackend is one of istio-cni's rule backends, as its chart selects
// it: global.nativeNftables, or the iptables binary it forces
// (FORCE_IPTABLES_BINARY in its env).
type istioCNIBackend struct {
	name     string
	nftables bool
	iptables string // "nft", "legacy"
}

// TestRealIstioCNIOnRealNode installs the real istio-cni (built from
// istio.io/istio by make tool-istioctl, packed by make images) on the real
// kubelet node with Istio's own chart (helm install of the module's
// manifests/charts/istio-cni: its DaemonSet, host network, its mounts,
// install-cni chaining istio-cni into the node's conflist), ambient on,
// with the ZDS stand-in ztunnel as the node's ztunnel DaemonSet. Ambient
// pods started on the node get their rules from istio-cni, and the agent's
// enrollment check (nodeagent.KubeMesh on the host's /proc, as the agent
// runs it) reads them: enrolled under its nftables backend and its iptables
// backend written by iptables-nft; "cannot check" under iptables-legacy;
// not enrolled, on redirection, once the pod's rules are removed and for a
// pod started while istio-cni is not installed. The /v1/cni check passes on
// the installed istio-cni and fails on the token once its ServiceAccount is
// deleted.
func TestRealIstioCNIOnRealNode(t *testing.T) {
	start := time.Now()
	c := Start(t, Options{Nodes: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := imagesDir()
	bin := filepath.Dir(dir)
	n := startRealNode(t, ctx, c, bin, nil)
	refs := map[string]string{}
	for _, img := range []string{"istio-cni", "ztunnel"} {
		ref, err := n.Containerd.Import(ctx, filepath.Join(dir, img+".tar"))
		if err != nil {
			t.Fatalf("%v (make tool-istioctl, then make images)", err)
		}
		refs[img] = ref
	}
	chart, mesh, pause := istioCNIOnRealNode(t, ctx, c, n, bin, refs["ztunnel"])
	setup := time.Since(start)

	// Each backend: istio-cni (re)started with it, a pod started under it.
	phase := time.Now()
	helmCmd := "install"
	for _, b := range []istioCNIBackend{{name: "nftables", nftables: true}, {name: "iptables-nft", iptables: "nft"}, {name: "iptables-legacy", iptables: "legacy"}} {
		installIstioCNI(t, ctx, c, n, bin, chart, refs["istio-cni"], helmCmd, b)
		helmCmd = "upgrade"
		waitIstioCNIAndZtunnel(t, ctx, c, n)
		pod := ambientPod(t, ctx, c, n, "app-"+b.name, pause)
		switch b.iptables {
		case "legacy":
			got := waitEnrollment(t, ctx, mesh, pod, func(p wire.PodEnrollment) bool { return p.Result != wire.Enrolled })
			if got.Result != wire.NotCheckable || !strings.Contains(got.Detail, "cannot check its redirection") || !strings.Contains(got.Detail, "legacy iptables") {
				t.Errorf("%s: %s, want not checkable: cannot check, legacy iptables", b.name, got)
			}
		default:
			if got := waitEnrollment(t, ctx, mesh, pod, func(p wire.PodEnrollment) bool { return p.Result == wire.Enrolled }); got.Result != wire.Enrolled {
				t.Errorf("%s: %s, want enrolled by the real istio-cni's rules", b.name, got)
			}
		}
		if b.nftables {
			// The pod's rules removed (its istio-ambient-* tables deleted):
			// not enrolled, on redirection.
			removeNftRules(t, ctx, mesh, pod)
			got := waitEnrollment(t, ctx, mesh, pod, func(p wire.PodEnrollment) bool { return p.Result != wire.Enrolled })
			if got.Result != wire.NotEnrolled || got.Failed != wire.CheckRedirection || !strings.Contains(got.Detail, "no istio-cni rules") {
				t.Errorf("rules removed: %s, want not enrolled on redirection, no istio-cni rules", got)
			}
		}
		t.Logf("%s: checked in %s", b.name, time.Since(phase).Round(time.Second))
		phase = time.Now()
	}

	// The CNI health check against the real istio-cni's files: its plugin
	// chained into the node's conflist, the kubeconfig in its run dir, the
	// plugin binary; then its ServiceAccount deleted, which revokes the token.
	agent := cniAgent(t, c, n, nil)
	h := agent.CheckCNI(ctx, "")
	if !h.OK() {
		t.Errorf("the CNI health of the installed istio-cni: %v, want ok", h.Problems())
	}
	for _, k := range h.Checks {
		t.Logf("cni check %s: %v, %s (%s)", k.Check, k.OK, k.Detail, k.File)
	}
	if err := c.Client.CoreV1().ServiceAccounts(IstioNamespace).Delete(ctx, nodeagent.DefaultCNIServiceAccountName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var tok wire.CNICheck
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, k := range agent.CheckCNI(ctx, "").Checks {
			if k.Check == wire.CNICheckToken {
				tok = k
			}
		}
		return !tok.OK, nil
	})
	if err != nil || !strings.Contains(tok.Detail, "refused the token") {
		t.Errorf("istio-cni's ServiceAccount deleted: token check %+v, want refused", tok)
	}
	t.Logf("revoked token: %s", tok.Detail)

	// istio-cni uninstalled (its DaemonSet deleted: install-cni takes its
	// plugin out of the conflist): a pod started now gets no rules.
	if out, err := exec.CommandContext(ctx, filepath.Join(bin, "helm"), "uninstall", "istio-cni", "-n", IstioNamespace, "--kubeconfig", c.Kubeconfig, "--wait").CombinedOutput(); err != nil {
		t.Fatalf("helm uninstall: %v: %s", err, out)
	}
	waitPods(t, ctx, c.Client, IstioNamespace, "k8s-app=istio-cni-node", func(pods []corev1.Pod) bool { return len(pods) == 0 })
	pod := ambientPod(t, ctx, c, n, "app-no-cni", pause)
	got := waitEnrollment(t, ctx, mesh, pod, func(p wire.PodEnrollment) bool { return p.Result != wire.Enrolled })
	if got.Result != wire.NotEnrolled || got.Failed != wire.CheckRedirection {
		t.Errorf("a pod started while istio-cni is down: %s, want not enrolled on redirection", got)
	}
	if conf := agent.CheckCNI(ctx, "").Checks[0]; conf.OK {
		t.Errorf("istio-cni uninstalled: config check %+v, want failed", conf)
	}
	t.Logf("istio-cni down: %s; setup %s, whole test %s", got, setup.Round(time.Second), time.Since(start).Round(time.Second))
}

// istioCNIOnRealNode readies the real node for Istio's istio-cni chart:
// /run/netns shared, the ZDS stand-in ztunnel (image ztunnel) as the node's
// ztunnel DaemonSet, the ambient namespace and the agent's mesh source on
// the host's /proc, started. It returns the chart, that source and the
// pause image for ambient pods; istio-cni is uninstalled when the test
// ends, and its pod's and ztunnel's logs are logged if it failed.
func istioCNIOnRealNode(t *testing.T, ctx context.Context, c *Cluster, n *RealNode, bin, ztunnel string) (string, *nodeagent.KubeMesh, string) {
	t.Helper()
	chart := istioCNIChart(t, ctx)
	sharedNetnsDir(t)
	// istio-cni writes host rules (kubelet probes' SNAT) that only its own
	// clean-up removes, when its DaemonSet goes; the host dirs its chart
	// hardcodes go too, when this test made them.
	for _, d := range []string{"/var/run/istio-cni", "/var/run/ztunnel"} {
		if _, err := os.Stat(d); os.IsNotExist(err) {
			t.Cleanup(func() { os.RemoveAll(d) })
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = exec.CommandContext(ctx, filepath.Join(bin, "helm"), "uninstall", "istio-cni", "-n", IstioNamespace, "--kubeconfig", c.Kubeconfig, "--wait", "--ignore-not-found").Run()
	})
	createNamespace(t, ctx, c.Client, IstioNamespace)
	if _, err := c.Client.AppsV1().DaemonSets(IstioNamespace).Create(ctx, zdsZtunnel(n.Name, ztunnel), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logsOf(t, c, n, "k8s-app=istio-cni-node", "install-cni")
			logsOf(t, c, n, "app=ztunnel", "istio-proxy")
		}
	})
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ambient", Labels: map[string]string{"istio.io/dataplane-mode": "ambient"}}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, nsObj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mesh, err := nodeagent.NewKubeMesh(c.Client, n.Name, "/proc")
	if err != nil {
		t.Fatal(err)
	}
	if err := mesh.Start(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	pause, _, err := archiveImage(filepath.Join(imagesDir(), "pause.tar"))
	if err != nil {
		t.Fatal(err)
	}
	return chart, mesh, pause
}

// istioCNIChart is Istio's istio-cni chart in the module tools/istioctl
// pins (the source bin/install-cni was built from).
func istioCNIChart(t *testing.T, ctx context.Context) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "istio.io/istio")
	cmd.Dir = filepath.Join(filepath.Dir(imagesDir()), "..", "tools", "istioctl")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("finding istio.io/istio's source (go list -m in tools/istioctl): %v", err)
	}
	chart := filepath.Join(strings.TrimSpace(string(out)), "manifests", "charts", "istio-cni")
	if _, err := os.Stat(filepath.Join(chart, "Chart.yaml")); err != nil {
		t.Fatalf("no istio-cni chart: %v (make tool-istioctl downloads the module)", err)
	}
	return chart
}

// installIstioCNI installs (or upgrades) istio-cni with its chart on the
// real node alone, ambient on, with backend b, and restarts its pod so
// that it runs with it (its settings are a ConfigMap its pod reads at start).
// extra are more helm arguments.
func installIstioCNI(t *testing.T, ctx context.Context, c *Cluster, n *RealNode, bin, chart, image, verb string, b istioCNIBackend, extra ...string) {
	t.Helper()
	args := []string{verb, "istio-cni", chart, "-n", IstioNamespace, "--kubeconfig", c.Kubeconfig,
		"--set", "ambient.enabled=true", "--set", "ambient.ipv6=false",
		"--set", "image=" + image, "--set", "pullPolicy=Never",
		"--set", "cniConfDir=" + n.CNIConfDir, "--set", "cniBinDir=" + n.CNIBinDir, "--set", "cniNetnsDir=/run/netns",
		"--set", fmt.Sprintf("global.nativeNftables=%t", b.nftables),
		// The host's netns from its own (host network), not from
		// /host/proc/1/ns/net: this machine's PID 1 is not the node's to enter.
		"--set", "env.ALLOW_SWITCH_TO_HOST_NS=false",
		"--set-json", `affinity={"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"kubernetes.io/hostname","operator":"In","values":["` + n.Name + `"]}]}]}}}`,
	}
	if b.iptables != "" {
		args = append(args, "--set", "env.FORCE_IPTABLES_BINARY="+b.iptables)
	}
	args = append(args, extra...)
	if out, err := exec.CommandContext(ctx, filepath.Join(bin, "helm"), args...).CombinedOutput(); err != nil {
		t.Fatalf("helm %s: %v: %s", strings.Join(args, " "), err, out)
	}
	if verb == "upgrade" {
		if err := c.Client.CoreV1().Pods(IstioNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "k8s-app=istio-cni-node"}); err != nil {
			t.Fatal(err)
		}
		waitPods(t, ctx, c.Client, IstioNamespace, "k8s-app=istio-cni-node", func(pods []corev1.Pod) bool {
			for _, p := range pods {
				if p.DeletionTimestamp != nil {
					return false
				}
			}
			return true
		})
	}
}

// waitIstioCNIAndZtunnel waits for istio-cni and the ztunnel stand-in to be
// Ready on the node (ztunnel is Ready once istio-cni has sent it its
// snapshot over ZDS).
func waitIstioCNIAndZtunnel(t *testing.T, ctx context.Context, c *Cluster, n *RealNode) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for _, sel := range []string{"k8s-app=istio-cni-node", "app=ztunnel"} {
		waitPods(t, ctx, c.Client, IstioNamespace, sel, func(pods []corev1.Pod) bool {
			for _, p := range pods {
				if p.Spec.NodeName == n.Name && p.DeletionTimestamp == nil && podReady(&p) {
					return true
				}
			}
			return false
		})
	}
}

// zdsZtunnel is the node's ztunnel DaemonSet: Istio's name, labels and
// container name, the ZDS stand-in (sim/zds/ztunnel) as its container, with
// ztunnel's chart's privileges (root, NET_ADMIN, SYS_ADMIN, NET_RAW: it
// enters the pods' namespaces) and its socket dir, the host's
// /var/run/ztunnel, which istio-cni's chart mounts too.
func zdsZtunnel(node, image string) *appsv1.DaemonSet {
	labels := map[string]string{"app": "ztunnel"}
	no, root, grace := false, int64(0), int64(5)
	dirOrCreate := corev1.HostPathDirectoryOrCreate
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: ZtunnelName, Namespace: IstioNamespace, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector:       &metav1.LabelSelector{MatchLabels: labels},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken:  &no,
					TerminationGracePeriodSeconds: &grace,
					NodeSelector:                  map[string]string{"kubernetes.io/hostname": node},
					Tolerations:                   []corev1.Toleration{{Key: TaintRealNode, Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{
						Name: "istio-proxy", Image: image, ImagePullPolicy: corev1.PullNever,
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz/ready", Port: intstr.FromInt32(15021)}}, PeriodSeconds: 1},
						SecurityContext: &corev1.SecurityContext{RunAsUser: &root, RunAsNonRoot: &no, Privileged: &no,
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_ADMIN", "SYS_ADMIN", "NET_RAW"}}},
						VolumeMounts: []corev1.VolumeMount{{Name: "cni-ztunnel-sock-dir", MountPath: "/var/run/ztunnel"}},
					}},
					Volumes: []corev1.Volume{{Name: "cni-ztunnel-sock-dir", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/run/ztunnel", Type: &dirOrCreate}}}},
				},
			},
		},
	}
}

// ambientPod starts a pod (the pause image) in the ambient namespace on the
// real node and waits until it runs.
func ambientPod(t *testing.T, ctx context.Context, c *Cluster, n *RealNode, name, image string) *corev1.Pod {
	t.Helper()
	no, grace := false, int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ambient", Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeName:                      n.Name,
			Tolerations:                   []corev1.Toleration{{Key: TaintRealNode, Operator: corev1.TolerationOpExists}},
			AutomountServiceAccountToken:  &no,
			TerminationGracePeriodSeconds: &grace,
			Containers:                    []corev1.Container{{Name: "app", Image: image, ImagePullPolicy: corev1.PullNever}},
		},
	}
	if _, err := c.Client.CoreV1().Pods("ambient").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := waitPods(t, ctx, c.Client, "ambient", "app="+name, func(pods []corev1.Pod) bool {
		return len(pods) == 1 && pods[0].Status.Phase == corev1.PodRunning
	})
	return &pods[0]
}

// waitEnrollment checks the node's enrollment until the pod's entry
// satisfies done (or 30 s pass: the informer may lag) and returns the last.
func waitEnrollment(t *testing.T, ctx context.Context, mesh *nodeagent.KubeMesh, pod *corev1.Pod, done func(wire.PodEnrollment) bool) wire.PodEnrollment {
	t.Helper()
	var last wire.PodEnrollment
	var e *wire.Enrollment
	_ = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		e = nodeagent.CheckEnrollment(mesh, "/proc", time.Now())
		for _, p := range e.Pods {
			if p.UID == string(pod.UID) {
				last = p
				return done(p), nil
			}
		}
		return false, nil
	})
	if last.UID == "" {
		t.Fatalf("the enrollment check never listed %s/%s: %+v", pod.Namespace, pod.Name, e)
	}
	return last
}

// removeNftRules deletes the pod's istio-cni tables (inet istio-*) in its namespace.
func removeNftRules(t *testing.T, ctx context.Context, mesh *nodeagent.KubeMesh, pod *corev1.Pod) {
	t.Helper()
	pods, err := mesh.AmbientPods()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if p.UID != string(pod.UID) {
			continue
		}
		out, err := exec.CommandContext(ctx, "nsenter", "--net="+p.Netns, "nft", "list", "tables").CombinedOutput()
		if err != nil {
			t.Fatalf("nft list tables in %s: %v: %s", p.Netns, err, out)
		}
		deleted := 0
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line) // table inet istio-proxy-nat
			if len(f) == 3 && f[1] == "inet" && strings.HasPrefix(f[2], "istio-") {
				if out, err := exec.CommandContext(ctx, "nsenter", "--net="+p.Netns, "nft", "delete", "table", f[1], f[2]).CombinedOutput(); err != nil {
					t.Fatalf("nft delete table %s %s: %v: %s", f[1], f[2], err, out)
				}
				deleted++
			}
		}
		if deleted == 0 {
			t.Fatalf("no inet istio-* table in %s's netns: %s", pod.Name, out)
		}
		return
	}
	t.Fatalf("the mesh source does not list %s", pod.Name)
}

// cniAgent is a node agent in proc mode on this host, reading the real
// node's CNI dirs and reviewing tokens with the admin's client, on
// loopback once run; with mesh (nil: none) its snapshots carry the ambient
// pods' enrollment.
func cniAgent(t *testing.T, c *Cluster, n *RealNode, mesh nodeagent.MeshSource) *nodeagent.Agent {
	t.Helper()
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("unused"), 0o600); err != nil {
		t.Fatal(err)
	}
	noCert := func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return nil, errors.New("not served") }
	a, err := nodeagent.New(nodeagent.Config{Node: n.Name, Mode: nodeagent.ModeProc, GetCertificate: noCert, TokenFile: token,
		CNIConfDir: n.CNIConfDir, CNIBinDir: n.CNIBinDir, CNITokenReviews: c.Client.AuthenticationV1().TokenReviews(),
		ListenAddr: "127.0.0.1:0", Mesh: mesh})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// logsOf logs the tail of a container's log in each pod of a selector on
// the real node.
func logsOf(t *testing.T, c *Cluster, n *RealNode, selector, container string) {
	pods, err := c.Client.CoreV1().Pods(IstioNamespace).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return
	}
	for _, p := range pods.Items {
		log, err := n.ContainerLog(&p, container)
		if err != nil {
			t.Logf("%s: %v", p.Name, err)
			continue
		}
		lines := strings.Split(log, "\n")
		t.Logf("--- tail of %s/%s:\n%s", p.Name, container, strings.Join(lines[max(0, len(lines)-40):], "\n"))
	}
}

// sharedNetnsDir makes the host's /run/netns a shared mount of itself, as
// `ip netns add` does, when it is not one yet: istio-cni's chart mounts it
// with HostToContainer propagation, which the runtime refuses on a path
// whose mount is private (this machine's root is). Left in place, as ip
// leaves it.
func sharedNetnsDir(t *testing.T) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 6 && f[4] == "/run/netns" && strings.Contains(line, " shared:") {
			return
		}
	}
	if err := os.MkdirAll("/run/netns", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--bind", "/run/netns", "/run/netns"}, {"--make-shared", "/run/netns"}} {
		if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
			t.Fatalf("mount %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
}
