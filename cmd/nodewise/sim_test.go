package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodewise/nodewise/test/testkit"
)

func run(bin string, args ...string) (stdout, stderr string, err error) {
	var o, e bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

func recordedPIDs(t *testing.T, dir string) []int {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "pids", "*.pid"))
	if err != nil || len(files) != 6 {
		t.Fatalf("want 6 PID files in %s/pids (etcd, the control plane, the kubelet and the injector), got %v (%v)", dir, files, err)
	}
	var pids []int
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	return pids
}

func running(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}

// `sim up` leaves a ready cluster running in the background with its PIDs
// recorded; `sim down` stops exactly those processes.
func TestSimUpStatusDown(t *testing.T) {
	bin := testkit.Binary(t, "nodewise")
	dir := filepath.Join(t.TempDir(), "sim")
	out, errOut, err := run(bin, "sim", "up", "--nodes", "3", "--zones", "2", "--state-dir", dir)
	if err != nil {
		t.Fatalf("sim up: %v\n%s%s", err, out, errOut)
	}
	pids := recordedPIDs(t, dir)
	t.Cleanup(func() { _, _, _ = run(bin, "sim", "down", "--state-dir", dir) })
	for _, pid := range pids {
		if !running(pid) {
			t.Fatalf("pid %d recorded by sim up is not running", pid)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "kubeconfig")); err != nil {
		t.Fatalf("sim up wrote no kubeconfig: %v", err)
	}
	out, _, err = run(bin, "sim", "status", "--state-dir", dir)
	if err != nil || !strings.Contains(out, "nodes: 3/3 Ready") {
		t.Fatalf("sim status: %v\n%s", err, out)
	}
	if _, errOut, err := run(bin, "sim", "install-istio", "--version", "1.27.3", "--state-dir", dir); err != nil {
		t.Fatalf("sim install-istio: %v\n%s", err, errOut)
	}
	simInjects(t, bin, dir)
	if _, errOut, err := run(bin, "sim", "down", "--state-dir", dir); err != nil {
		t.Fatalf("sim down: %v\n%s", err, errOut)
	}
	for _, pid := range pids {
		if running(pid) {
			t.Errorf("pid %d started by sim up still runs after sim down", pid)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("sim down left the state dir behind: %v", err)
	}
}

// injectedRow is the inventory's line for the sample namespace catalog with
// both its pods on an injected 1.27.3 proxy.
var injectedRow = regexp.MustCompile(`(?m)^catalog\s+sidecar\s+1-27\s+1\.27\.3\s+2$`)

// simInjects: the background injector gives the sample sidecar namespaces
// (on the default tag) their revision's proxy, which the inventory shows;
// after a second install, a namespace on the new revision gets the new one.
func simInjects(t *testing.T, bin, dir string) {
	t.Helper()
	kc := "--kubeconfig=" + filepath.Join(dir, "kubeconfig")
	var out string
	deadline := time.Now().Add(time.Minute)
	for {
		var err error
		out, _, err = run(bin, "inventory", kc)
		if err == nil && injectedRow.MatchString(out) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sample sidecar pods never showed their injected 1.27.3 proxy in the inventory:\n%s", out)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("inventory:\n%s", out)
	if _, errOut, err := run(bin, "sim", "install-istio", "--version", "1.28.1", "--state-dir", dir); err != nil {
		t.Fatalf("sim install-istio 1.28.1: %v\n%s", err, errOut)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "newrev", Labels: map[string]string{"istio.io/rev": "1-28"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, err := client.CoreV1().Pods("newrev").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "docker.io/nodewise/sample-web:1.0"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a pod on revision 1-28: %v", err)
	}
	var images []string
	for _, c := range pod.Spec.Containers {
		images = append(images, c.Image)
	}
	if len(images) != 2 || images[1] != "docker.io/istio/proxyv2:1.28.1" {
		t.Errorf("a pod on revision 1-28 has containers %v, want its app and docker.io/istio/proxyv2:1.28.1", images)
	}
}

// Bad input gets one line on stderr, a non-zero exit, and starts nothing.
func TestSimBadInput(t *testing.T) {
	bin := testkit.Binary(t, "nodewise")
	base := t.TempDir()
	inUse := filepath.Join(base, "in-use")
	if err := os.MkdirAll(inUse, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(inUse, "cluster.json"), []byte(`{"processes":[{"name":"etcd","pid":1,"argv":["/nonexistent"]}],"ports":{"APIServer":1}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	corrupt := filepath.Join(base, "corrupt")
	if err := os.MkdirAll(corrupt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(corrupt, "cluster.json"), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sim", "up", "--nodes", "0", "--state-dir", filepath.Join(base, "zero")}, "nodes must be between 1 and 16640"},
		{[]string{"sim", "up", "--nodes", "2", "--zones", "3", "--state-dir", filepath.Join(base, "zones")}, "zones must be between 1"},
		{[]string{"sim", "up", "--nodes", "2", "--state-dir", inUse}, "already in use"},
		{[]string{"sim", "down", "--state-dir", filepath.Join(base, "missing")}, "no simulated cluster"},
		{[]string{"sim", "down", "--state-dir", corrupt}, "is corrupt"},
		{[]string{"sim", "up", "--nodes", "2"}, `"state-dir" not set`},
	} {
		out, errOut, err := run(bin, tc.args...)
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		if err == nil || len(lines) != 1 || !strings.Contains(errOut, tc.want) || out != "" {
			t.Errorf("%v: exit %v, stdout %q, stderr %q; want one stderr line with %q and a non-zero exit", tc.args, err, out, errOut, tc.want)
		}
	}
	for _, dir := range []string{"zero", "zones", "missing"} {
		if _, err := os.Stat(filepath.Join(base, dir)); !os.IsNotExist(err) {
			t.Errorf("bad input created %s", dir)
		}
	}
	// Refusing an in-use state dir leaves its state alone.
	if _, err := os.Stat(filepath.Join(inUse, "cluster.json")); err != nil {
		t.Errorf("refusing an in-use state dir removed its state: %v", err)
	}
}
