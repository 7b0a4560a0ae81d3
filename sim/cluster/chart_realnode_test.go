package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/nodewise/nodewise/agentpki"
	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/leader"
)

// TestChartOnRealNode installs the chart with `helm install` onto a cluster
// with a real kubelet node, from the package a release makes
// (hack/release-chart.sh on the images `make images` built: version and
// appVersion the images' tag, each image pinned by its digest), and checks
// that the orchestrator, the agent and the probe run there as containers:
// pulled by the node's containerd from a registry on loopback (the images
// pushed there under their ghcr.io names; the node reaches it through a
// hosts.toml mirror, as a cluster behind a private mirror does), Running
// the digests the package names, Ready through their own probes, and with
// the securityContext the chart renders, unchanged. The orchestrator in its
// container reports the package's appVersion. The agent is Ready only once
// its serving certificate is issued, so this also has the orchestrator, in
// its container and with in-cluster credentials, sign the agent's CSR; the
// test then trusts only the bundle the orchestrator publishes, for the
// node's name, to read the agent. Last, NodeRollouts of the node's ztunnel (rolloutOnRealNode): the
// orchestrator judges the node from that agent's evidence, passes a healthy
// build and halts on one that never gets Ready.
func TestChartOnRealNode(t *testing.T) {
	c := Start(t, Options{Nodes: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	dir := imagesDir()
	bin := filepath.Dir(dir)
	reg := startRegistry(t, ctx, bin)
	n := startRealNode(t, ctx, c, bin, map[string]string{"ghcr.io": "http://" + reg.Host})
	// Pushed from a containerd of its own: the node's holds none of the
	// images' content, so its kubelet pulls every blob from the registry.
	pusher, err := StartContainerd(ctx, t.TempDir(), ContainerdOptions{})
	if err != nil {
		t.Fatal(err)
	}
	images := []string{"orchestrator", "nodeagent", "probe"}
	refs := pushImages(t, ctx, pusher, reg, dir, images...)
	pushZtunnelBuilds(t, ctx, pusher, reg, dir)
	pusher.Stop()

	// The orchestrator is a Deployment: pin its one replica to the real node,
	// which it must tolerate (and its cordon, for the rollouts below). The
	// agent and the probe tolerate every node. The judge samples the agents
	// every second, for the rollouts' 10 s baselines.
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(fmt.Sprintf(`orchestrator:
  replicas: 1
  nodeSelector: {kubernetes.io/hostname: %s}
  tolerations: [{key: %s, operator: Exists, effect: NoSchedule}]
  extraArgs: [--agent-sample-every=1s]
`, n.Name, TaintRealNode)), 0o644); err != nil {
		t.Fatal(err)
	}
	// The release's package: the chart's own image names, with the tag
	// `make images` gave them and their digests, and its own pull policy:
	// the node has none of them.
	pkg, appVersion, digests := releaseChart(t, ctx, bin, dir, images)
	args := []string{"install", "nodewise", pkg,
		"--kubeconfig", c.Kubeconfig, "-n", "nodewise-system", "--create-namespace", "-f", values,
		"--set", "revisions.enabled=false"}
	// The chart's Roles for the data plane live in the Istio namespace; Istio
	// itself may come later (TestDeployBeforeIstio).
	createNamespace(t, ctx, c.Client, "istio-system")
	helm := filepath.Join(bin, "helm")
	if out, err := exec.CommandContext(ctx, helm, args...).CombinedOutput(); err != nil {
		t.Fatalf("helm %s: %v: %s", strings.Join(args, " "), err, out)
	}
	manifest, err := exec.CommandContext(ctx, helm, "get", "manifest", "nodewise", "-n", "nodewise-system", "--kubeconfig", c.Kubeconfig).Output()
	if err != nil {
		t.Fatalf("helm get manifest: %v", err)
	}
	rendered := renderedPodSpecs(t, string(manifest))
	running := map[string]corev1.Pod{}

	for _, w := range []struct{ ns, name, image string }{
		{"nodewise-system", "nodewise-orchestrator", refs["orchestrator"]},
		{"nodewise-agent", "nodewise-agent", refs["nodeagent"]},
		{"nodewise-probe", "nodewise-probe", refs["probe"]},
	} {
		want, ok := rendered[w.name]
		if !ok {
			t.Fatalf("the chart rendered no workload %s", w.name)
		}
		var pod corev1.Pod
		waitPods(t, ctx, c.Client, w.ns, "app.kubernetes.io/name="+w.name, func(pods []corev1.Pod) bool {
			for _, p := range pods {
				if p.Spec.NodeName == n.Name && podReady(&p) {
					pod = p
					return true
				}
			}
			return false
		})
		running[w.name] = pod
		// The image the chart pins: the tag the images were pushed under,
		// with the digest of the image the test imported; the node's
		// containerd resolved it to that digest (imageID, repo@digest).
		repo, _, _ := strings.Cut(w.image, ":")
		pinned := w.image + "@" + digests[w.image]
		cs := pod.Status.ContainerStatuses
		if len(pod.Spec.Containers) != 1 || pod.Spec.Containers[0].Image != pinned {
			t.Errorf("%s: the pod runs %v, want the image %s", w.name, pod.Spec.Containers, pinned)
		}
		if len(cs) != 1 || cs[0].State.Running == nil || cs[0].ImageID != repo+"@"+digests[w.image] {
			t.Errorf("%s: container statuses %+v, want one running image %s@%s", w.name, cs, repo, digests[w.image])
		}
		if !reflect.DeepEqual(pod.Spec.SecurityContext, want.SecurityContext) {
			t.Errorf("%s: pod securityContext %+v, the chart renders %+v", w.name, pod.Spec.SecurityContext, want.SecurityContext)
		}
		if len(pod.Spec.Containers) != 1 || !reflect.DeepEqual(pod.Spec.Containers[0].SecurityContext, want.Containers[0].SecurityContext) {
			t.Errorf("%s: container securityContext differs from the chart's %+v", w.name, want.Containers[0].SecurityContext)
		}
		if want.Containers[0].Image != pinned {
			t.Errorf("%s: the chart renders image %s, want its default %s", w.name, want.Containers[0].Image, pinned)
		}
	}
	for _, name := range images {
		checkPulledThroughMirror(t, reg, refs[name])
	}
	agentSeesPods(t, ctx, c, n, running["nodewise-agent"], running["nodewise-probe"])
	versionFromServer(t, ctx, c, bin, running["nodewise-orchestrator"], refs["orchestrator"], appVersion)
	rolloutOnRealNode(t, ctx, c, n, running["nodewise-probe"])
}

// versionFromServer runs `nodewise version -o json` against the cluster: it
// prints Kubernetes' version, the orchestrator Deployment with its image's
// version and its one Ready replica, and the running orchestrator's build,
// which the orchestrator in that pod writes on its leader Lease: the build
// inside the image, the same as the CLI's (make builds both) and the chart's
// appVersion, also what the process serves as nodewise_build_info on its
// metrics port.
func versionFromServer(t *testing.T, ctx context.Context, c *Cluster, bin string, orch corev1.Pod, image, appVersion string) {
	t.Helper()
	out, err := exec.CommandContext(ctx, filepath.Join(bin, "nodewise"), "version", "-o", "json", "--kubeconfig", c.Kubeconfig).Output()
	if err != nil {
		t.Fatalf("nodewise version: %v: %s", err, out)
	}
	var v struct {
		Client     struct{ Version string }
		Kubernetes string
		Server     []struct{ Name, Kind, Version, Ready string }
		Running    []struct{ Lease, Holder, Version string }
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("nodewise version -o json printed %s: %v", out, err)
	}
	if v.Client.Version != appVersion {
		t.Errorf("nodewise version: the client is %q, want the chart's appVersion %q", v.Client.Version, appVersion)
	}
	if !strings.HasPrefix(v.Kubernetes, "v1.") {
		t.Errorf("nodewise version: Kubernetes %q, want the API server's v1.x", v.Kubernetes)
	}
	_, tag, _ := strings.Cut(image, ":")
	found := false
	for _, s := range v.Server {
		if s.Name == "nodewise-orchestrator" {
			found = true
			if s.Kind != "Deployment" || s.Version != tag || s.Ready != "1/1" {
				t.Errorf("nodewise version: the orchestrator %+v, want Deployment %s 1/1", s, tag)
			}
		}
	}
	if !found {
		t.Errorf("nodewise version printed no orchestrator: %s", out)
	}
	leaders := 0
	for _, r := range v.Running {
		if r.Holder == orch.Name {
			leaders++
			if r.Version != v.Client.Version {
				t.Errorf("nodewise version: the running orchestrator %s (Lease %s) is %q, want the build in its image, %q", r.Holder, r.Lease, r.Version, v.Client.Version)
			}
		}
	}
	if leaders == 0 {
		t.Errorf("nodewise version printed no leader Lease held by the orchestrator pod %s with its %s: %s", orch.Name, leader.VersionAnnotation, out)
	}
	resp, err := http.Get("http://" + net.JoinHostPort(orch.Status.PodIP, "8080") + "/metrics")
	if err != nil {
		t.Fatalf("the orchestrator's metrics: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	want := `nodewise_build_info{component="orchestrator",goversion=`
	if info := grepLine(string(b), want); !strings.Contains(info, `version="`+v.Client.Version+`"`) {
		t.Errorf("the running orchestrator's build: %q, want version %q (the CLI's build)", info, v.Client.Version)
	}
}

// releaseChart packages the chart as `make release` does
// (hack/release-chart.sh) from the image archives in dir, for the version
// they are tagged with, and returns the package, its appVersion as Helm
// reads it, and each image's manifest digest (by its ghcr.io name and tag)
// as the archive records it, read here, apart from the script.
func releaseChart(t *testing.T, ctx context.Context, bin, dir string, names []string) (pkg, appVersion string, digests map[string]string) {
	t.Helper()
	digests = map[string]string{}
	version := ""
	for _, name := range names {
		ref, digest, err := archiveImage(filepath.Join(dir, name+".tar"))
		if err != nil {
			t.Fatal(err)
		}
		digests[ref] = digest
		version = ref[strings.LastIndex(ref, ":")+1:]
	}
	cmd := exec.CommandContext(ctx, filepath.Join("..", "..", "hack", "release-chart.sh"), version, dir, t.TempDir())
	cmd.Env = append(os.Environ(), "HELM="+filepath.Join(bin, "helm"))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/release-chart.sh %s: %v: %s", version, err, stderr.String())
	}
	pkg = strings.TrimSpace(string(out))
	meta, err := exec.CommandContext(ctx, filepath.Join(bin, "helm"), "show", "chart", pkg).Output()
	if err != nil {
		t.Fatalf("helm show chart %s: %v", pkg, err)
	}
	appVersion = strings.TrimSpace(strings.TrimPrefix(grepLine(string(meta), "appVersion:"), "appVersion:"))
	if appVersion != version {
		t.Fatalf("the package's appVersion is %q, want %q (the images' tag)", appVersion, version)
	}
	return pkg, appVersion, digests
}

// agentSeesPods checks that the agent in its container counts with eBPF (its
// log and nodewise_agent_mode say so, with no fallback to /proc) and that its
// counters see the probe pod on the node: the kubelet's readiness probe
// connects to it every period, so its accepts grow. It reads /metrics as
// the orchestrator does, with the orchestrator's token for the agents'
// audience.
func agentSeesPods(t *testing.T, ctx context.Context, c *Cluster, n *RealNode, agent, probe corev1.Pod) {
	t.Helper()
	logs, err := n.ContainerLog(&agent, "agent")
	if err != nil {
		t.Fatalf("the agent's log: %v", err)
	}
	if fallback := grepLine(logs, "falling back"); fallback != "" {
		t.Errorf("the agent in its container did not load its eBPF programs: %s", fallback)
	}
	get := agentGetter(t, ctx, c, n)
	accepts := `nodewise_pod_tcp_accepts_total{namespace="` + probe.Namespace + `",pod="` + probe.Name + `"`
	var body string
	err = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		var ok bool
		body, ok = get(ctx, "/metrics")
		return ok && metricSum(body, accepts) > 0, nil
	})
	if err != nil {
		t.Fatalf("the agent's /metrics never counted the probe pod's accepted connections (%s): %v; it served:\n%s", accepts, err, body)
	}
	mode := grepLine(body, "nodewise_agent_mode{")
	if !strings.Contains(mode, `mode="ebpf"`) || !strings.HasSuffix(mode, " 1") {
		t.Errorf("nodewise_agent_mode: %q, want mode=\"ebpf\" 1; the agent's log:\n%s", mode, logs)
	}
	t.Logf("the agent: %s; %s…} summed %v", mode, accepts, metricSum(body, accepts))

	// The probe's namespace is ambient and no istio-cni runs here: the
	// agent in its container finds the probe pod (its informers, the host's
	// /proc, the pod's cgroup), enters its network namespace and finds no
	// redirection (docs/enrollment.md).
	var snap wire.Snapshot
	err = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		var ok bool
		body, ok = get(ctx, "/v1/snapshot")
		snap = wire.Snapshot{}
		if !ok || json.Unmarshal([]byte(body), &snap) != nil || snap.Enrollment == nil {
			return false, nil
		}
		for _, p := range snap.Enrollment.Pods {
			if p.UID == string(probe.UID) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the agent's snapshot never reported the probe pod's enrollment: %v; it served:\n%s", err, body)
	}
	for _, p := range snap.Enrollment.Pods {
		if p.UID == string(probe.UID) && (p.Result != wire.NotEnrolled || p.Failed != wire.CheckRedirection || !strings.Contains(p.Detail, "no istio-cni rules")) {
			t.Errorf("the probe pod's enrollment: %s, want not enrolled for want of istio-cni's redirection", p)
		}
	}
	t.Logf("the agent's enrollment: ztunnel %q, %v (error %q)", snap.Enrollment.Ztunnel, snap.Enrollment.Pods, snap.Enrollment.Error)
}

// agentGetter returns a GET of the real node's agent (path: /metrics,
// /v1/snapshot…) as the orchestrator makes it: a token for the agent's
// audience, the agent's certificate checked against the bundle the
// orchestrator publishes and for the node's name (as
// remote.AgentConfig.VerifyNodeName does: the orchestrator in its
// container signed it for this node). It answers the body, and whether the
// agent answered 200 (else the body is the error).
func agentGetter(t *testing.T, ctx context.Context, c *Cluster, n *RealNode) func(ctx context.Context, path string) (string, bool) {
	t.Helper()
	tok, err := c.Client.CoreV1().ServiceAccounts("nodewise-system").CreateToken(ctx, "nodewise-orchestrator",
		&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{"nodewise-agent"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bundle, err := c.Client.CoreV1().ConfigMaps("nodewise-system").Get(ctx, agentpki.BundleConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the agents' CA bundle the orchestrator publishes: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(bundle.Data["ca.crt"])) {
		t.Fatalf("ConfigMap %s holds no PEM certificate in ca.crt: %v", agentpki.BundleConfigMapName, bundle.Data)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: n.Name, MinVersion: tls.VersionTLS12}}}
	return func(ctx context.Context, path string) (string, bool) {
		req, _ := http.NewRequestWithContext(ctx, "GET", "https://"+net.JoinHostPort(n.IP, "9443")+path, nil)
		req.Header.Set("Authorization", "Bearer "+tok.Status.Token)
		resp, err := client.Do(req)
		if err != nil {
			return err.Error(), false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b), resp.StatusCode == http.StatusOK
	}
}

// grepLine is the first line of text that contains s, or "".
func grepLine(text, s string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// metricSum adds the values of the samples in a Prometheus text exposition
// whose line starts with prefix.
func metricSum(text, prefix string) float64 {
	var sum float64
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, prefix) {
			continue
		}
		if f := strings.Fields(l); len(f) > 1 {
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			sum += v
		}
	}
	return sum
}

// renderedPodSpecs maps each Deployment and DaemonSet of a helm manifest to
// its pod template's spec.
func renderedPodSpecs(t *testing.T, manifest string) map[string]corev1.PodSpec {
	t.Helper()
	specs := map[string]corev1.PodSpec{}
	for _, doc := range strings.Split(manifest, "\n---") {
		if !strings.Contains(doc, "kind: Deployment") && !strings.Contains(doc, "kind: DaemonSet") {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("decoding the chart's manifest: %v", err)
		}
		switch o := obj.(type) {
		case *appsv1.Deployment:
			specs[o.Name] = o.Spec.Template.Spec
		case *appsv1.DaemonSet:
			specs[o.Name] = o.Spec.Template.Spec
		}
	}
	return specs
}

func podReady(p *corev1.Pod) bool {
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}
