package cluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/nodewise/nodewise/sim/istiochart"
	"github.com/nodewise/nodewise/sim/simpki"
)

// The real istiod: pilot-discovery (built by `make tool-istioctl` from the
// istio.io/istio that tools/istioctl pins) run as a process beside the API
// server, one per revision, with the objects Istio's istiod chart renders for
// that revision. Its pods in the cluster (the chart's istiod-<rev>
// Deployment) are simulated like any other: they are what the inventory
// reads a revision's version from. What serves is the process: the API
// server calls its injection webhook at https://127.0.0.1:<port>/inject (the
// chart's own istiodRemote.injectionURL), and istiod patches the caBundle of
// its revision's webhooks, revision tags included, as it does in a cluster.

// IstiodOptions describe one revision of the real istiod.
type IstiodOptions struct {
	// Version is the Istio version the revision stands for, such as 1.28.1:
	// the revision is 1-28 and the chart's image tag is the version, so
	// istiod injects docker.io/istio/proxyv2:<version> and its Deployment
	// runs docker.io/istio/pilot:<version>. The pilot-discovery binary is
	// the one built, whatever the version. Required.
	Version string
	// Tags are revision tags the revision's chart creates
	// (values.revisionTags): istio-revision-tag-<tag> webhooks of istiod's
	// own, pointing at this revision.
	Tags []string
	// BinDir holds pilot-discovery and istioctl; empty means the directory
	// the cluster's binaries came from.
	BinDir string
}

// Istiod is one running revision of the real istiod.
type Istiod struct {
	// Revision is the revision name (1-28), Version the chart's image tag.
	Revision, Version string
	// InjectURL is the injection webhook's URL, as the API server calls it.
	InjectURL string
	// CABundle is the CA of istiod's webhook serving certificate, which
	// istiod patches into its revision's webhooks.
	CABundle []byte
	// HTTPPort serves /ready; MonitoringPort serves /metrics.
	HTTPPort, MonitoringPort int
	// StartUp is how long pilot-discovery took from its start to /ready.
	StartUp time.Duration

	proc *process
}

// istiodPorts are a revision's listening ports, all on loopback.
type istiodPorts struct{ HTTP, GRPC, SecureGRPC, HTTPS, Monitoring, Ctrlz int }

// StartIstiod installs a revision of Istio's istiod chart, rendered by the
// built istioctl with its webhooks pointing at loopback, and runs
// pilot-discovery for it as the revision's ServiceAccount (the chart's
// istiod ClusterRole and Role). It returns once istiod answers /ready; the
// cluster's Stop stops it, and so does Istiod.Stop.
func (c *Cluster) StartIstiod(ctx context.Context, opts IstiodOptions) (*Istiod, error) {
	rev, err := Revision(opts.Version)
	if err != nil {
		return nil, err
	}
	binDir := opts.BinDir
	if binDir == "" {
		binDir = filepath.Dir(c.bins.APIServer)
	}
	discovery, istioctl := filepath.Join(binDir, "pilot-discovery"), filepath.Join(binDir, "istioctl")
	if !allExecutable(discovery, istioctl) {
		return nil, fmt.Errorf("pilot-discovery and istioctl not found in %s: run `make tool-istioctl`", binDir)
	}
	dir := filepath.Join(c.Dir, "istiod-"+rev)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	var ps istiodPorts
	for _, p := range []*int{&ps.HTTP, &ps.GRPC, &ps.SecureGRPC, &ps.HTTPS, &ps.Monitoring, &ps.Ctrlz} {
		l, port, err := listenFree()
		if err != nil {
			return nil, err
		}
		l.Close()
		*p = port
	}
	ca, err := istiodCertificates(dir, rev)
	if err != nil {
		return nil, err
	}
	i := &Istiod{Revision: rev, Version: opts.Version, CABundle: ca, HTTPPort: ps.HTTP, MonitoringPort: ps.Monitoring,
		InjectURL: fmt.Sprintf("https://127.0.0.1:%d/inject", ps.HTTPS)}

	objs, err := c.renderIstiod(ctx, istioctl, dir, rev, opts, i, ps)
	if err != nil {
		return nil, err
	}
	if err := createIfMissing(ctx, c.Client.CoreV1().Namespaces().Create, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: IstioNamespace}}); err != nil {
		return nil, err
	}
	if err := applyRendered(ctx, c.Config, objs); err != nil {
		return nil, fmt.Errorf("installing istiod %s: %w", rev, err)
	}
	env, err := istiodEnv(objs, rev)
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := c.writeServiceAccountKubeconfig(ctx, kubeconfig, "istiod-"+rev); err != nil {
		return nil, err
	}
	argv := []string{discovery, "discovery",
		"--kubeconfig=" + kubeconfig,
		"--httpAddr=" + loopback(ps.HTTP), "--grpcAddr=" + loopback(ps.GRPC),
		"--secureGRPCAddr=" + loopback(ps.SecureGRPC), "--httpsAddr=" + loopback(ps.HTTPS),
		"--monitoringAddr=" + loopback(ps.Monitoring),
		"--ctrlz_address=127.0.0.1", "--ctrlz_port=" + strconv.Itoa(ps.Ctrlz),
		"--tlsCertFile=" + filepath.Join(dir, "tls.crt"), "--tlsKeyFile=" + filepath.Join(dir, "tls.key"),
		"--caCertFile=" + filepath.Join(dir, "ca.crt"),
		// No mesh file: istiod reads the chart's istio-<rev> ConfigMap.
		"--meshConfig=" + filepath.Join(dir, "no-mesh-file"),
		"--domain=cluster.local", "--log_output_level=default:info",
	}
	begun := time.Now()
	p, err := c.startComponentEnv("istiod-"+rev, argv, env)
	if err != nil {
		return nil, err
	}
	i.proc = p
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := waitHealthy(wctx, fmt.Sprintf("http://127.0.0.1:%d/ready", ps.HTTP), "", "", p); err != nil {
		return nil, fmt.Errorf("istiod %s: %w", rev, err)
	}
	i.StartUp = time.Since(begun)
	return i, nil
}

func loopback(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// istiodCertificates writes istiod's webhook serving certificate for
// 127.0.0.1 (and its Service's names) and the CA that signed it into dir,
// and returns that CA.
func istiodCertificates(dir, rev string) ([]byte, error) {
	const year = 365 * 24 * time.Hour
	ca, err := simpki.NewCA("istiod-"+rev+" webhook CA", year)
	if err != nil {
		return nil, err
	}
	svc := "istiod-" + rev
	cert, key, err := ca.IssueServing(svc, []net.IP{net.ParseIP("127.0.0.1")},
		[]string{svc + "." + IstioNamespace + ".svc", "istiod." + IstioNamespace + ".svc", "localhost"}, year)
	if err != nil {
		return nil, err
	}
	for name, data := range map[string][]byte{"ca.crt": ca.CertPEM(), "tls.crt": cert, "tls.key": key} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	return ca.CertPEM(), nil
}

// renderIstiod renders the base and istiod charts for the revision (the
// minimal profile) with its webhooks at i's loopback URLs and CA.
func (c *Cluster) renderIstiod(ctx context.Context, istioctl, dir, rev string, opts IstiodOptions, i *Istiod, ps istiodPorts) ([]unstructured.Unstructured, error) {
	ca := base64.StdEncoding.EncodeToString(i.CABundle)
	tags := opts.Tags
	if tags == nil {
		tags = []string{}
	}
	op := map[string]any{
		"apiVersion": "install.istio.io/v1alpha1",
		"kind":       "IstioOperator",
		"spec": map[string]any{
			"profile": "minimal", "revision": rev, "hub": "docker.io/istio", "tag": opts.Version,
			"values": map[string]any{
				"revisionTags": tags,
				"istiodRemote": map[string]any{"injectionURL": i.InjectURL, "injectionCABundle": ca},
				"base": map[string]any{
					"validationURL":      fmt.Sprintf("https://127.0.0.1:%d/validate", ps.HTTPS),
					"validationCABundle": ca,
				},
			},
		},
	}
	data, err := yaml.Marshal(op)
	if err != nil {
		return nil, err
	}
	file := filepath.Join(dir, "istio-operator.yaml")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	objs, err := istiochart.Render(rctx, istioctl, "-f", file)
	if err != nil {
		return nil, fmt.Errorf("rendering istiod %s: %w", rev, err)
	}
	return objs, nil
}

// istiodEnv is the environment the chart gives istiod's discovery container
// (its literal values; those taken from the pod are filled in as the pod
// would have them), without KUBECONFIG, which names a mounted remote
// cluster's secret.
func istiodEnv(objs []unstructured.Unstructured, rev string) ([]string, error) {
	for _, u := range objs {
		if u.GetKind() != "Deployment" || u.GetName() != "istiod-"+rev {
			continue
		}
		var d appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
			return nil, fmt.Errorf("reading the chart's istiod Deployment: %w", err)
		}
		env := []string{"POD_NAME=istiod-" + rev + "-local", "POD_NAMESPACE=" + IstioNamespace, "SERVICE_ACCOUNT=istiod-" + rev}
		for _, ct := range d.Spec.Template.Spec.Containers {
			if ct.Name != "discovery" {
				continue
			}
			for _, e := range ct.Env {
				if e.ValueFrom == nil && e.Name != "KUBECONFIG" {
					env = append(env, e.Name+"="+e.Value)
				}
			}
		}
		return env, nil
	}
	return nil, fmt.Errorf("the istiod chart rendered no Deployment istiod-%s", rev)
}

// writeServiceAccountKubeconfig writes a kubeconfig that authenticates as
// the ServiceAccount sa of the Istio namespace, with a token the API server
// issues for it (a day long: longer than any test).
func (c *Cluster) writeServiceAccountKubeconfig(ctx context.Context, path, sa string) error {
	secs := int64(24 * 3600)
	tr, err := c.Client.CoreV1().ServiceAccounts(IstioNamespace).CreateToken(ctx, sa,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("issuing a token for %s/%s: %w", IstioNamespace, sa, err)
	}
	return c.state.writeTokenKubeconfig(path, "system:serviceaccount:"+IstioNamespace+":"+sa, tr.Status.Token)
}

// Stop stops pilot-discovery (SIGTERM, then SIGKILL), by its PID.
func (i *Istiod) Stop() { i.proc.stop(10 * time.Second) }

// PID is pilot-discovery's process id.
func (i *Istiod) PID() int { return i.proc.PID }

// RSS is pilot-discovery's resident set size in bytes, now.
func (i *Istiod) RSS() (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", i.proc.PID))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" && f[2] == "kB" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", i.proc.PID)
}

// LogTail is the end of istiod's log, for a test's failure message.
func (i *Istiod) LogTail(lines int) string { return string(bytes.TrimSpace(tail(i.proc.Log, lines))) }
