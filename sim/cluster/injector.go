package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/sim/injector"
)

// The background sidecar injector of a detached cluster (`nodewise sim`):
// istiod's injection webhook for every revision, answering with the version
// of that revision's istiod Deployment, so a person can run a sidecar
// migration by hand and see pods come back on the new proxy.

func (s *state) injectorDir() string { return filepath.Join(s.Dir, "pki", "injector") }

func (s *state) injectorURL(rev string) string {
	return fmt.Sprintf("https://127.0.0.1:%d/inject/rev/%s", s.Ports.Injector, rev)
}

// startInjector starts the injector process when Options.InjectorArgv says
// how, after writing the certificate its webhooks will trust.
func (c *Cluster) startInjector(ctx context.Context) error {
	s := c.state
	if len(s.Options.InjectorArgv) == 0 {
		return nil
	}
	if !c.detached() {
		return fmt.Errorf("InjectorArgv needs KubeletArgv: the injector runs beside a background kubelet")
	}
	if _, err := injector.WriteCertificates(s.injectorDir()); err != nil {
		return err
	}
	if err := c.startComponent("sim-injector", s.Options.InjectorArgv); err != nil {
		return err
	}
	return waitHealthy(ctx, fmt.Sprintf("https://127.0.0.1:%d/healthz", s.Ports.Injector), "", filepath.Join(s.injectorDir(), "ca.crt"), s.process("sim-injector"))
}

// Injector is what InstallIstio needs to register the cluster's background
// injector (IstioOptions.InjectorURL and CABundle); ok is false when the
// cluster runs none.
func (c *Cluster) Injector() (url func(rev string) string, caBundle []byte, ok bool, err error) {
	if len(c.state.Options.InjectorArgv) == 0 {
		return nil, nil, false, nil
	}
	ca, err := injector.WriteCertificates(c.state.injectorDir())
	if err != nil {
		return nil, nil, false, err
	}
	return c.state.injectorURL, ca, true, nil
}

// RunInjector is the background injector process of the cluster in dir: it
// serves until ctx ends, injecting each revision's proxy at the version its
// istiod Deployment runs.
func RunInjector(ctx context.Context, dir string, log *zap.Logger) error {
	s, err := loadState(dir)
	if err != nil {
		return err
	}
	cfg, err := restConfig(filepath.Join(s.Dir, "kubeconfig"))
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	srv, err := injector.StartWith(injector.Config{
		Addr:    fmt.Sprintf("127.0.0.1:%d", s.Ports.Injector),
		CertDir: s.injectorDir(),
		VersionOf: func(ctx context.Context, rev string) (string, error) {
			return istiodVersion(ctx, client, rev)
		},
	})
	if err != nil {
		return err
	}
	defer srv.Close()
	log.Info("sidecar injector serving", zap.Int("port", s.Ports.Injector))
	<-ctx.Done()
	return nil
}

// istiodVersion is the version istiod-<rev> runs: its discovery image's tag.
func istiodVersion(ctx context.Context, client kubernetes.Interface, rev string) (string, error) {
	d, err := client.AppsV1().Deployments(IstioNamespace).Get(ctx, "istiod-"+rev, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("finding istiod of revision %s: %w", rev, err)
	}
	for _, ct := range d.Spec.Template.Spec.Containers {
		if ct.Name == "discovery" {
			if i := strings.LastIndex(ct.Image, ":"); i >= 0 {
				return ct.Image[i+1:], nil
			}
		}
	}
	return "", fmt.Errorf("istiod-%s has no discovery container with a tagged image", rev)
}
