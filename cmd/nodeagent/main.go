// Command nodeagent is the per-node agent: flags → nodeagent.Config → Run.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodewise/nodewise/nodeagent"
)

var version = "dev"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "nodeagent: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("nodeagent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var cfg nodeagent.Config
	var kubeconfig string
	var creds credFlags
	creds.register(fs)
	fs.StringVar(&cfg.Node, "node", os.Getenv("NODE_NAME"), "node name (default $NODE_NAME, then the hostname)")
	fs.StringVar(&cfg.Mode, "mode", nodeagent.ModeAuto, "counting mode: auto, ebpf or proc")
	fs.StringVar(&cfg.ListenAddr, "listen", ":9443", "HTTPS listen address")
	fs.StringVar(&cfg.CertFile, "tls-cert", "", "TLS serving certificate (PEM)")
	fs.StringVar(&cfg.KeyFile, "tls-key", "", "TLS private key (PEM)")
	fs.StringVar(&cfg.TokenFile, "token-file", "", "file holding the bearer token callers must present")
	fs.StringVar(&cfg.ProcRoot, "proc-root", "/proc", "the /proc to read (the host's, with hostPID, for proc mode)")
	fs.StringVar(&cfg.CgroupRoot, "cgroup-root", "/sys/fs/cgroup", "the host's cgroup v2 mount")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig for naming pods (default: in-cluster; none: pods are named by UID)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w (flags: -node -mode -listen -tls-cert -tls-key -token-file -proc-root -cgroup-root -kubeconfig %s)", err, creds.names())
	}
	log, err := zap.NewProduction()
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck
	cfg.Logger, cfg.Version = log, version

	rc, err := restConfig(kubeconfig)
	if err != nil {
		return err
	}
	var client kubernetes.Interface
	if rc != nil {
		if client, err = kubernetes.NewForConfig(rc); err != nil {
			return fmt.Errorf("building the Kubernetes client: %w", err)
		}
		cfg.PodLister = &nodeagent.KubePodLister{Client: client, Node: cfg.Node}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	renew, err := creds.apply(ctx, &cfg, client)
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

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("loading kubeconfig %s: %w", kubeconfig, err)
		}
		return rc, nil
	}
	rc, err := rest.InClusterConfig()
	if err != nil {
		return nil, nil // not in a cluster: pods are named by UID
	}
	return rc, nil
}
