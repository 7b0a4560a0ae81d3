// Command nodeagent is the per-node agent: flags → nodeagent.Config → Run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodewise/nodewise/buildinfo"
	"github.com/nodewise/nodewise/cmd/internal/usage"
	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/kubeconfig"
	"github.com/nodewise/nodewise/nodeagent"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "nodeagent: %v\n", err)
		os.Exit(1)
	}
}

// flags is what the command line says; parseFlags fills it.
type flags struct {
	agent       nodeagent.Config
	kubeconfig  string
	showVersion bool
	creds       credFlags
	mesh        string
	// ztunnel names the DaemonSets whose pods are the node's ztunnels
	// (--istio-namespace, --ztunnel-daemonsets).
	ztunnel           nodeagent.ZtunnelDaemonSets
	ztunnelDaemonSets string
	podHistograms     bool
	cniServiceAccount string
}

// Values of --mesh.
const (
	meshAuto = "auto" // check enrollment whenever the agent reaches the Kubernetes API
	meshOff  = "off"
)

// parseFlags reads args; -h prints every flag with its description to out
// and returns flag.ErrHelp.
func parseFlags(args []string, out io.Writer) (flags, error) {
	fs := flag.NewFlagSet("nodeagent", flag.ContinueOnError)
	fs.SetOutput(out)
	usage.Set(fs, "nodeagent measures every pod on its node (eBPF, or /proc without it) and serves the evidence\n"+
		"the orchestrator's judge reads: /metrics and a snapshot API over TLS with a bearer token.")
	var f flags
	cfg := &f.agent
	fs.StringVar(&cfg.Node, "node", os.Getenv("NODE_NAME"), "node name (default $NODE_NAME, then the hostname)")
	fs.StringVar(&cfg.Mode, "mode", nodeagent.ModeAuto, "counting mode: auto, ebpf or proc")
	fs.StringVar(&cfg.ListenAddr, "listen", ":9443", "HTTPS listen address")
	fs.StringVar(&cfg.CertFile, "tls-cert", "", "TLS serving certificate (PEM; required unless --tls-csr)")
	fs.StringVar(&cfg.KeyFile, "tls-key", "", "TLS private key (PEM; required unless --tls-csr)")
	fs.StringVar(&cfg.TokenFile, "token-file", "", "file holding the bearer token callers must present (required unless --token-review)")
	f.creds.register(fs)
	fs.StringVar(&cfg.ProcRoot, "proc-root", "/proc", "the /proc to read (the host's, with hostPID, for proc mode)")
	fs.StringVar(&cfg.CgroupRoot, "cgroup-root", "/sys/fs/cgroup", "the host's cgroup v2 mount")
	fs.StringVar(&cfg.CNIConfDir, "cni-conf-dir", nodeagent.DefaultCNIConfDir, "the node's CNI conf dir (read-only), where istio-cni's config and kubeconfig are checked (/v1/cni)")
	fs.StringVar(&cfg.CNIBinDir, "cni-bin-dir", nodeagent.DefaultCNIBinDir, "the node's CNI bin dir (read-only), where istio-cni's plugin binary is checked")
	fs.StringVar(&cfg.CNIKubeconfig, "cni-kubeconfig", "", "the kubeconfig istio-cni writes (default: --cni-conf-dir/"+nodeagent.DefaultCNIKubeconfigName+")")
	fs.StringVar(&f.cniServiceAccount, "cni-service-account", nodeagent.DefaultCNIServiceAccountName, "istio-cni's ServiceAccount in --istio-namespace: the token in its kubeconfig must authenticate as it (a TokenReview the agent makes as itself)")
	fs.DurationVar(&cfg.HistoryEvery, "history-every", nodeagent.DefaultHistoryEvery, "how often a snapshot is kept in the history (/v1/history), the judge's baseline")
	fs.DurationVar(&cfg.HistoryKeep, "history-keep", nodeagent.DefaultHistoryKeep, "how far back the history reaches: the longest baseline read from it without a wait")
	fs.BoolVar(&f.podHistograms, "pod-histograms", true, "serve each pod side's histograms (connect latency, SRTT, connection ages) on /metrics: 93 series a pod side, 6 without them; /v1/snapshot keeps them either way")
	fs.StringVar(&f.mesh, "mesh", meshAuto, "proof of enrollment of the node's ambient pods (docs/enrollment.md): auto (when the agent reaches the Kubernetes API) or off")
	fs.StringVar(&f.ztunnel.Namespace, "istio-namespace", istio.DefaultNamespace, "the namespace of the ztunnel DaemonSets (--ztunnel-daemonsets) and of istio-cni's ServiceAccount (--cni-service-account)")
	fs.StringVar(&f.ztunnelDaemonSets, "ztunnel-daemonsets", nodeagent.DefaultZtunnelDaemonSet, "comma-separated names of the DaemonSets whose pods on the node run its ztunnel: only their processes named ztunnel are ztunnels to the enrollment check")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig for naming pods (default: in-cluster; none: pods are named by UID)")
	fs.BoolVar(&f.showVersion, "version", false, "print the version and exit")
	err := fs.Parse(args)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		// The flag package printed the usage too; keep the error to one line.
		return f, fmt.Errorf("%s (see nodeagent --help)", firstLine(err.Error()))
	}
	cfg.NoPodHistograms = !f.podHistograms
	for _, name := range strings.Split(f.ztunnelDaemonSets, ",") {
		if name = strings.TrimSpace(name); name != "" {
			f.ztunnel.DaemonSets = append(f.ztunnel.DaemonSets, name)
		}
	}
	if err == nil && (len(f.ztunnel.DaemonSets) == 0 || f.ztunnel.Namespace == "") {
		return f, fmt.Errorf("ztunnel DaemonSets %q in namespace %q: want at least one name and a namespace (see nodeagent --help)", f.ztunnelDaemonSets, f.ztunnel.Namespace)
	}
	return f, err
}

func run(args []string, out io.Writer) error {
	var usageOut strings.Builder
	f, err := parseFlags(args, &usageOut)
	if errors.Is(err, flag.ErrHelp) {
		_, err = io.WriteString(out, usageOut.String())
		return err
	}
	if err != nil {
		return err
	}
	if f.showVersion {
		_, err := fmt.Fprintln(out, "nodeagent", buildinfo.Version())
		return err
	}
	if f.mesh != meshAuto && f.mesh != meshOff {
		return fmt.Errorf("mesh %q: want %s or %s", f.mesh, meshAuto, meshOff)
	}
	cfg := f.agent
	cfg.CNIServiceAccount = "system:serviceaccount:" + f.ztunnel.Namespace + ":" + f.cniServiceAccount
	log, err := zap.NewProduction()
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck
	cfg.Logger, cfg.Version = log, buildinfo.Version()
	cfg.Registry = prometheus.NewRegistry()
	if err := buildinfo.Register(cfg.Registry, "nodeagent"); err != nil {
		return fmt.Errorf("registering the build metrics: %w", err)
	}

	rc, err := restConfig(f.kubeconfig)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var client kubernetes.Interface
	if rc != nil {
		if client, err = kubernetes.NewForConfig(rc); err != nil {
			return fmt.Errorf("building the Kubernetes client: %w", err)
		}
		if err := podsFromAPI(ctx, &cfg, client, f.mesh == meshAuto, f.ztunnel); err != nil {
			return err
		}
		cfg.CNITokenReviews = client.AuthenticationV1().TokenReviews()
	} else if f.mesh == meshAuto {
		log.Info("enrollment is not checked: no Kubernetes API (not in a cluster and no --kubeconfig)")
	}
	renew, err := f.creds.apply(ctx, &cfg, rc, client)
	if err != nil {
		return err
	}

	agent, err := nodeagent.New(cfg)
	if err != nil {
		return err
	}
	if renew != nil {
		go func() { _ = renew(ctx) }() // logs its own failures; the current certificate keeps serving
	}
	return agent.Run(ctx)
}

// podsFromAPI names the node's pods from the API (informers on this node's
// pods and on namespaces) and, with mesh, checks its ambient pods'
// enrollment from them, against the ztunnels of the pods of the DaemonSets
// zt names. The agent serves even while the API cannot list them: names
// then fall back to UIDs, and enrollment is reported as an error.
func podsFromAPI(ctx context.Context, cfg *nodeagent.Config, client kubernetes.Interface, mesh bool, zt nodeagent.ZtunnelDaemonSets) error {
	node := cfg.Node
	if node == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("node name not set (--node or $NODE_NAME) and hostname unknown: %w", err)
		}
		node = h
	}
	procRoot := cfg.ProcRoot
	if procRoot == "" {
		procRoot = "/proc"
	}
	km, err := nodeagent.NewKubeMesh(client, node, procRoot, nodeagent.WithZtunnelDaemonSets(zt))
	if err != nil {
		return err
	}
	if err := km.Start(ctx, 10*time.Second); err != nil {
		cfg.Logger.Warn("starting without the node's pods", zap.Error(err))
	}
	cfg.PodLister = km
	if mesh {
		cfg.Mesh = km
	}
	return nil
}

// restConfig loads an explicit kubeconfig, else the in-cluster config; with
// neither, it returns nil and pods are named by UID.
func restConfig(path string) (*rest.Config, error) {
	if path != "" {
		return kubeconfig.Load(path)
	}
	rc, err := rest.InClusterConfig()
	if err != nil {
		return nil, nil // not in a cluster: pods are named by UID
	}
	return rc, nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
