package sidecar

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/revisions"
)

// controllerEnv, when set to a kubeconfig path, makes the test binary run a
// migration controller instead of tests: the crash test starts it as a child
// process and kills it with SIGKILL.
const controllerEnv = "NODEWISE_TEST_MIGRATION_CONTROLLER_KUBECONFIG"

// dieAfterWriteEnv, when set, makes that controller SIGKILL itself right after
// its first successful write of a RevisionMigration status, a namespace, a
// workload or a waypoint Gateway: the crash tests kill it at every persisted
// step in turn.
const dieAfterWriteEnv = "NODEWISE_TEST_MIGRATION_CONTROLLER_DIE_AFTER_WRITE"

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
	if os.Getenv(dieAfterWriteEnv) != "" {
		cfg.Wrap(dieAfterWrite)
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
	dyn, err := dynamic.NewForConfig(cfg) // waypoints: Only moves Gateways
	if err != nil {
		return err
	}
	log, err := zap.NewDevelopment()
	if err != nil {
		return err
	}
	ctrl, err := revisions.New(revisions.Config{Kube: kube, Migrations: mc, Dynamic: dyn, Log: log, Registry: prometheus.NewRegistry(), Interval: 200 * time.Millisecond})
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

// dieAfterWrite kills the process as soon as one persisted step (a write of
// a migration's status, a namespace, a workload or a Gateway) has succeeded,
// before the controller sees the response.
func dieAfterWrite(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(r)
		if err != nil || r.Method == http.MethodGet || resp.StatusCode >= 300 {
			return resp, err
		}
		p := r.URL.Path
		if strings.HasSuffix(p, "/status") && strings.Contains(p, "/revisionmigrations/") || strings.Contains(p, "/namespaces/") && !strings.Contains(p, "/events") &&
			(strings.Count(p, "/") == 4 || strings.Contains(p, "/deployments/") || strings.Contains(p, "/statefulsets/") || strings.Contains(p, "/daemonsets/") || strings.Contains(p, "/gateways")) {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
		return resp, err
	})
}

// controllerUntil runs controller processes that die after each persisted
// step, one after another, checking check after every death, until done.
// It returns how many processes died.
func (e *env) controllerUntil(timeout time.Duration, done func() bool, check func(deaths int)) int {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	deaths := 0
	for !done() {
		if time.Now().After(deadline) {
			e.t.Fatalf("not done after %s and %d controller deaths", timeout, deaths)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), controllerEnv+"="+e.c.Kubeconfig, dieAfterWriteEnv+"=1")
		if err := cmd.Start(); err != nil {
			e.t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		for stop := false; !stop; {
			select {
			case <-exited:
				deaths++
				check(deaths)
				stop = true
			case <-time.After(250 * time.Millisecond):
				if done() || time.Now().After(deadline) {
					_ = cmd.Process.Signal(syscall.SIGKILL)
					<-exited
					stop = true
				}
			}
		}
	}
	return deaths
}
