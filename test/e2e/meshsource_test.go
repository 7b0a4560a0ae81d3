package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/nodeagent"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/testkit"
)

// TestKubeMeshOnTheKernel runs the production mesh source against a real
// API server and this machine's /proc: a pod's process runs in a network
// namespace of its own, placed in a cgroup whose path names the pod's UID
// (the kubelet's cgroupfs layout), and two processes named ztunnel run in the
// cgroup of the ztunnel DaemonSet's pod (the systemd layout). The source finds the pod and
// its namespace, the newer ztunnel as the one serving; the enrollment check
// then opens the namespace and finds no istio-cni rules there (no istio-cni
// on this machine): not enrolled, failing redirection.
func TestKubeMeshOnTheKernel(t *testing.T) {
	t.Parallel()
	testkit.RequireRoot(t, "create network namespaces and cgroups")
	cgRoot := writableCgroup(t)
	c := cluster.Start(t, cluster.Options{Nodes: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	node := c.Nodes[0].Name

	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"istio.io/dataplane-mode": "ambient"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "plain"}},
	} {
		if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pod := func(ns, name string, labels map[string]string) *corev1.Pod {
		p, err := c.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	app := pod("shop", "app", nil)
	noProc := pod("plain", "no-process", map[string]string{"istio.io/dataplane-mode": "ambient"})
	optedOut := pod("shop", "opted-out", map[string]string{"istio.io/dataplane-mode": "none"})
	pod("plain", "not-ambient", nil)

	// The app pod's process, in a network namespace made for it.
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		testkit.Unavailable(t, "no sleep binary: %v", err)
	}
	appProc := startIn(t, sleep, &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET})
	joinCgroup(t, filepath.Join(cgRoot, "kubepods", "besteffort", "pod"+string(app.UID), "c1"), appProc)
	// The opted-out pod's process too: a process alone does not make a pod ambient.
	joinCgroup(t, filepath.Join(cgRoot, "kubepods", "besteffort", "pod"+string(optedOut.UID), "c1"), startIn(t, sleep, &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}))

	// Two ztunnels (the binary's name is what counts), the second newer, in
	// the cgroup of the ztunnel DaemonSet's pod on the node.
	zbin := filepath.Join(t.TempDir(), "ztunnel")
	if b, err := os.ReadFile(sleep); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(zbin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	zuid := strings.ReplaceAll(string(ztunnelPodOn(t, ctx, c, node).UID), "-", "_")
	zcg := filepath.Join(cgRoot, "kubepods.slice", "kubepods-burstable.slice", "kubepods-burstable-pod"+zuid+".slice")
	older := startIn(t, zbin, nil)
	joinCgroup(t, filepath.Join(zcg, "cri-containerd-old.scope"), older)
	time.Sleep(50 * time.Millisecond) // start times count in clock ticks
	newer := startIn(t, zbin, nil)
	joinCgroup(t, filepath.Join(zcg, "cri-containerd-new.scope"), newer)

	km, err := nodeagent.NewKubeMesh(c.Client, node, "/proc")
	if err != nil {
		t.Fatal(err)
	}
	if err := km.Start(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	var got map[string]nodeagent.MeshPod
	testkit.WaitFor(t, time.Minute, "the two ambient pods, Running", func() (bool, error) {
		pods, err := km.AmbientPods()
		got = map[string]nodeagent.MeshPod{}
		for _, p := range pods {
			got[p.Namespace+"/"+p.Name] = p
		}
		return len(got) == 2, fmt.Errorf("ambient pods %+v (%v)", pods, err)
	})
	wantNetns := "/proc/" + strconv.Itoa(appProc) + "/ns/net"
	if p := got["shop/app"]; p.UID != string(app.UID) || p.Netns != wantNetns {
		t.Errorf("shop/app: %+v, want UID %s and netns %s", p, app.UID, wantNetns)
	}
	if p := got["plain/no-process"]; p.UID != string(noProc.UID) || p.Netns != "" || !strings.Contains(p.NoNetns, "no process") {
		t.Errorf("plain/no-process: %+v, want no netns and why", p)
	}
	if same, err := sameFile(wantNetns, "/proc/self/ns/net"); err != nil || same {
		t.Fatalf("the app's namespace is the test's own (%v): the check would prove nothing", err)
	}

	z, err := km.Ztunnels()
	if err != nil {
		t.Fatal(err)
	}
	if z.Current != newer || len(z.Older) != 1 || z.Older[0] != older {
		t.Errorf("ztunnels %+v, want current %d and older [%d]", z, newer, older)
	}

	e := nodeagent.CheckEnrollment(km, "/proc", time.Now())
	if e.Error != "" || e.Ztunnel != "pid "+strconv.Itoa(newer) || len(e.Pods) != 2 {
		t.Fatalf("enrollment %+v, want both pods checked against pid %d", e, newer)
	}
	for _, p := range e.Pods {
		switch p.Name {
		case "app":
			if p.Result != wire.NotEnrolled || p.Failed != wire.CheckRedirection || !strings.Contains(p.Detail, "no istio-cni rules") {
				t.Errorf("app: %+v, want not enrolled for want of istio-cni's rules", p)
			}
		case "no-process":
			if p.Result != wire.NotCheckable || !strings.Contains(p.Detail, "network namespace was not found") {
				t.Errorf("no-process: %+v, want not checkable", p)
			}
		}
	}
}

// ztunnelPodOn creates a ztunnel DaemonSet in istio-system (Istio's names)
// and returns its pod on node.
func ztunnelPodOn(t *testing.T, ctx context.Context, c *cluster.Cluster, node string) *corev1.Pod {
	t.Helper()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: cluster.IstioNamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	labels := map[string]string{"app": "ztunnel"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: cluster.IstioNamespace, Name: cluster.ZtunnelName},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "istio-proxy", Image: "registry.invalid/ztunnel:1"}}},
			},
		},
	}
	if _, err := c.Client.AppsV1().DaemonSets(cluster.IstioNamespace).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pod *corev1.Pod
	testkit.WaitFor(t, time.Minute, "the ztunnel DaemonSet's pod on "+node, func() (bool, error) {
		pods, err := c.Client.CoreV1().Pods(cluster.IstioNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=ztunnel"})
		if err != nil {
			return false, err
		}
		for i, p := range pods.Items {
			if p.Spec.NodeName == node {
				pod = &pods.Items[i]
				return true, nil
			}
		}
		return false, fmt.Errorf("%d pods, none on %s", len(pods.Items), node)
	})
	return pod
}

// writableCgroup makes a cgroup directory for the test under a hierarchy
// this machine has (cgroup v2, else v1's pids) and removes what the test
// put there at the end.
func writableCgroup(t *testing.T) string {
	t.Helper()
	var root string
	for _, dir := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/pids"} {
		if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); err == nil {
			if dir == "/sys/fs/cgroup" {
				var st syscall.Statfs_t
				if syscall.Statfs(dir, &st) != nil || st.Type != 0x63677270 { // CGROUP2_SUPER_MAGIC
					continue // a v1 tmpfs holding the hierarchies
				}
			}
			root = dir
			break
		}
	}
	if root == "" {
		testkit.Unavailable(t, "no cgroup hierarchy to place processes in")
	}
	dir := filepath.Join(root, "nodewise-test-"+string(uuid.NewUUID()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		testkit.Unavailable(t, "cannot create a cgroup under %s: %v", root, err)
	}
	t.Cleanup(func() {
		// Children first; processes were killed by then (cleanups run last-in first-out).
		var dirs []string
		_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = os.Remove(dirs[i])
		}
	})
	return dir
}

// startIn starts bin (sleeping) with attr and kills it at the end.
func startIn(t *testing.T, bin string, attr *syscall.SysProcAttr) int {
	t.Helper()
	cmd := exec.Command(bin, "600")
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd.Process.Pid
}

// joinCgroup moves pid into the cgroup dir, creating it.
func joinCgroup(t *testing.T, dir string, pid int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatalf("moving %d into %s: %v", pid, dir, err)
	}
}

func sameFile(a, b string) (bool, error) {
	sa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	sb, err := os.Stat(b)
	if err != nil {
		return false, err
	}
	return os.SameFile(sa, sb), nil
}
