package sidecar

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/revisions"
)

// controllerEnv, when set to a kubeconfig path, makes the test binary run a
// migration controller instead of tests: the crash test starts it as a child
// process and kills it with SIGKILL.
const controllerEnv = "NODEWISE_TEST_MIGRATION_CONTROLLER_KUBECONFIG"

func TestMain(m *testing.M) {
	if kc := os.Getenv(controllerEnv); kc != "" {
		if err := runController(kc); err != nil {
			fmt.Fprintln(os.Stderr, "controller:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func runController(kubeconfig string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	nwc, err := v1alpha1.NewForConfig(cfg)
	if err != nil {
		return err
	}
	mc := nwc.RevisionMigrations()
	log, err := zap.NewDevelopment()
	if err != nil {
		return err
	}
	ctrl, err := revisions.New(revisions.Config{Kube: kube, Migrations: mc, Log: log, Registry: prometheus.NewRegistry(), Interval: 200 * time.Millisecond})
	if err != nil {
		return err
	}
	return ctrl.Run(context.Background())
}

// controllerProcess starts a controller in a child process; kill sends it SIGKILL.
func (e *env) controllerProcess(name string) (kill func()) {
	e.t.Helper()
	logf, err := os.Create(filepath.Join(e.t.TempDir(), name+".log"))
	if err != nil {
		e.t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), controllerEnv+"="+e.c.Kubeconfig)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	done := false
	kill = func() {
		if done {
			return
		}
		done = true
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		_ = logf.Close()
	}
	e.t.Cleanup(kill)
	return kill
}
