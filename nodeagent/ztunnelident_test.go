package nodeagent

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodewise/nodewise/bpf"
	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/test/netrig"
	"github.com/nodewise/nodewise/test/testkit"
)

// The rig's stand-in role (netrig's RunStandinIfChild): "1" listens on
// ztunnel's ports in the namespace it starts in.
const standinRole = "NODEWISE_NETRIG_STANDIN"

// kernelMesh is a node of real processes in real pod cgroups and network
// namespaces, with a fake API that knows its pods.
type kernelMesh struct {
	t    *testing.T
	rig  *netrig.Rig
	root string // cgroup v2 mount
	objs []*corev1.Pod
}

func newKernelMesh(t *testing.T) *kernelMesh {
	return &kernelMesh{t: t, root: cgroup2Root(t), rig: netrig.New(t)}
}

// appPod is an ambient pod of namespace shop with its app in its cgroup.
func (k *kernelMesh) appPod(name, uid string, rules bool) (*netrig.Pod, string) {
	p := k.rig.AddPod(name)
	if rules {
		installRules(k.t, p.Name, istioRules)
	}
	cg := k.rig.PodCgroup(k.root, uid)
	p.StartApp(cg)
	k.objs = append(k.objs, apiPod("shop", name, uid, nil))
	return p, cg
}

// ztunnelPod is a pod of the ztunnel DaemonSet in istio-system; its cgroup.
func (k *kernelMesh) ztunnelPod(name, uid string) string {
	k.objs = append(k.objs, ztunnelAPIPod(name, uid, "ztunnel"))
	return k.rig.PodCgroup(k.root, uid)
}

// source starts the production mesh source over the fake API's pods and
// this machine's /proc.
func (k *kernelMesh) source() *KubeMesh {
	k.t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"istio.io/dataplane-mode": "ambient"}}}
	client := fake.NewClientset(ns, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-system"}})
	for _, p := range k.objs {
		if _, err := client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			k.t.Fatal(err)
		}
	}
	return startedKubeMesh(k.t, client, "/proc")
}

// startedKubeMesh is the mesh source of node-a, its informers listed; they
// stop at the end of the test.
func startedKubeMesh(t *testing.T, client *fake.Clientset, procRoot string, opts ...KubeMeshOption) *KubeMesh {
	t.Helper()
	km, err := NewKubeMesh(client, "node-a", procRoot, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := km.Start(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	return km
}

// named is a link called name to bin, in a directory of its own: a process
// started through it has name as its comm.
func named(t *testing.T, bin, name string) string {
	t.Helper()
	link := filepath.Join(t.TempDir(), name)
	if err := os.Symlink(bin, link); err != nil {
		t.Fatal(err)
	}
	return link
}

// spawn starts argv (in network namespace netns when set, in cgroup v2
// directory cgroupDir when set) and kills it at cleanup; with ready it waits
// for the process's "ready" line.
func spawn(t *testing.T, netns, cgroupDir string, env []string, ready bool, argv ...string) *exec.Cmd {
	t.Helper()
	cmd := prepare(t, netns, cgroupDir, env, argv...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %v: %v", argv, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	if ready {
		if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || strings.TrimSpace(line) != "ready" {
			t.Fatalf("%v did not get ready: %q %v", argv, line, err)
		}
	}
	return cmd
}

func prepare(t *testing.T, netns, cgroupDir string, env []string, argv ...string) *exec.Cmd {
	t.Helper()
	if netns != "" {
		argv = append([]string{"ip", "netns", "exec", netns}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	if cgroupDir != "" {
		dir, err := os.Open(cgroupDir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dir.Close() })
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd())}
	}
	return cmd
}

// standinNamedZtunnel starts the rig's ztunnel stand-in as a process named
// ztunnel, listening in netns, in cgroupDir.
func standinNamedZtunnel(t *testing.T, netns, cgroupDir string) int {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return spawn(t, netns, cgroupDir, []string{standinRole + "=1"}, true, named(t, exe, "ztunnel"), "-test.run=^$").Process.Pid
}

// fakeZtunnel starts a copy of sleep named ztunnel in cgroupDir: what any
// unprivileged pod can run.
func fakeZtunnel(t *testing.T, cgroupDir string) int {
	t.Helper()
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(sleep)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "ztunnel")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return spawn(t, "", cgroupDir, nil, false, bin, "1000000").Process.Pid
}

// TestFakeZtunnelInAppPodChangesNoVerdict: a pod that runs a copy of sleep
// named ztunnel (newer than the real one) is not taken as the node's
// ztunnel: the ztunnel is the process of the ztunnel DaemonSet's pod, and the
// enrolled pod stays enrolled, checked against that process's listeners.
func TestFakeZtunnelInAppPodChangesNoVerdict(t *testing.T) {
	k := newKernelMesh(t)
	app, appCgroup := k.appPod("app", "0a1b2c3d-0000-4000-8000-00000000fa01", true)
	zt := standinNamedZtunnel(t, app.Name, k.ztunnelPod("ztunnel-x7k2p", "0a1b2c3d-0000-4000-8000-00000000fa02"))
	time.Sleep(20 * time.Millisecond) // start times count in clock ticks: the fake is newer
	fake := fakeZtunnel(t, appCgroup)
	km := k.source()

	z, err := km.Ztunnels()
	if err != nil {
		t.Fatal(err)
	}
	if z.Current != zt || len(z.Older) != 0 {
		t.Errorf("ztunnels %+v, want current %d (the DaemonSet's pod) alone, not the app pod's fake %d", z, zt, fake)
	}
	e := CheckEnrollment(km, "/proc", time.Now())
	if e.Error != "" || e.Ztunnel != "pid "+strconv.Itoa(zt) || len(e.Pods) != 1 || e.Pods[0].Result != wire.Enrolled {
		t.Errorf("enrollment %+v (ztunnel %q), want shop/app enrolled against pid %d", e.Pods, e.Ztunnel, zt)
	}
}

// reusePID starts cmd so that it gets PID pid (free again: its process was
// reaped), by setting the kernel's last PID just below it; other processes
// of the machine may take it first, so it tries again.
func reusePID(t *testing.T, pid int, mk func() *exec.Cmd) *exec.Cmd {
	t.Helper()
	for range 500 {
		cmd := mk()
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(pid-1)), 0o644); err != nil {
			t.Fatalf("setting the next PID: %v", err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if cmd.Process.Pid == pid {
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			})
			return cmd
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	t.Fatalf("PID %d was never handed out again", pid)
	return nil
}

// kill ends a process and reaps it: its PID is free.
func kill(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
}

// TestReusedPIDIsNotReadAsThePodsOrZtunnels: the scan names a process by its
// PID, and the check reads it later. When that process exits and its PID
// goes to a process of another pod, the check must not read that pod's
// namespace as the first pod's (a pod with no istio-cni rules would pass
// on an enrolled pod's), nor the newcomer's sockets as ztunnel's (an
// impostor's listeners would pass for ztunnel's).
func TestReusedPIDIsNotReadAsThePodsOrZtunnels(t *testing.T) {
	t.Run("pod", func(t *testing.T) {
		k := newKernelMesh(t)
		victim := k.rig.AddPod("victim") // no istio-cni rules: not enrolled
		const victimUID = "0a1b2c3d-0000-4000-8000-00000000fb01"
		victimProc := spawn(t, victim.Name, k.rig.PodCgroup(k.root, victimUID), nil, false, "sleep", "1000000")
		k.objs = append(k.objs, apiPod("shop", "victim", victimUID, nil))
		decoy, decoyCgroup := k.appPod("decoy", "0a1b2c3d-0000-4000-8000-00000000fb02", true)
		decoy.StartStandin()
		km := k.source()

		pods, err := km.AmbientPods()
		if err != nil {
			t.Fatal(err)
		}
		var scanned []MeshPod
		for _, p := range pods {
			if p.Name == "victim" {
				scanned = append(scanned, p)
			}
		}
		if len(scanned) != 1 || scanned[0].Netns != "/proc/"+strconv.Itoa(victimProc.Process.Pid)+"/ns/net" {
			t.Fatalf("victim scanned as %+v, want its process %d's namespace", scanned, victimProc.Process.Pid)
		}
		kill(t, victimProc)
		reused := reusePID(t, victimProc.Process.Pid, func() *exec.Cmd { return prepare(t, decoy.Name, decoyCgroup, nil, "sleep", "1000000") })
		testkit.WaitFor(t, 10*time.Second, "the process given the victim's PID in the decoy's namespace", func() (bool, error) {
			ino, err := nsInode("/proc/" + strconv.Itoa(reused.Process.Pid) + "/ns/net")
			return err == nil && ino == decoy.Inode, err
		})

		e := CheckEnrollment(meshFake{pods: scanned, zt: Ztunnels{Current: decoy.StandinPID()}}, "/proc", time.Now())
		if len(e.Pods) != 1 || e.Pods[0].Result != wire.NotCheckable || !strings.Contains(e.Pods[0].Detail, "exited") {
			t.Errorf("victim, its PID now the decoy pod's: %+v, want not checkable (its process exited), not the decoy's namespace", e.Pods)
		}
	})
	t.Run("ztunnel", func(t *testing.T) {
		k := newKernelMesh(t)
		app, appCgroup := k.appPod("app", "0a1b2c3d-0000-4000-8000-00000000fc01", true)
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		zcmd := spawn(t, app.Name, k.ztunnelPod("ztunnel-q8v4m", "0a1b2c3d-0000-4000-8000-00000000fc02"), []string{standinRole + "=1"}, true, named(t, exe, "ztunnel"), "-test.run=^$")
		km := k.source()
		z, err := km.Ztunnels()
		if err != nil || z.Current != zcmd.Process.Pid {
			t.Fatalf("ztunnels %+v (%v), want current %d", z, err, zcmd.Process.Pid)
		}
		pods, err := km.AmbientPods()
		if err != nil || len(pods) != 1 {
			t.Fatalf("ambient pods %+v (%v)", pods, err)
		}
		if e := CheckEnrollment(meshFake{pods: pods, zt: z}, "/proc", time.Now()); e.Pods[0].Result != wire.Enrolled {
			t.Fatalf("before the ztunnel exits: %+v, want enrolled", e.Pods)
		}
		// The ztunnel exits; an app process of the pod takes its PID and
		// listens on ztunnel's ports in the pod's namespace.
		kill(t, zcmd)
		var out io.Reader
		reusePID(t, zcmd.Process.Pid, func() *exec.Cmd {
			cmd := prepare(t, app.Name, appCgroup, []string{standinRole + "=1"}, exe, "-test.run=^$")
			if out, err = cmd.StdoutPipe(); err != nil {
				t.Fatal(err)
			}
			return cmd
		})
		if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || strings.TrimSpace(line) != "ready" {
			t.Fatalf("the impostor does not listen: %q %v", line, err)
		}
		e := CheckEnrollment(meshFake{pods: pods, zt: z}, "/proc", time.Now())
		if len(e.Pods) != 1 || e.Pods[0].Result == wire.Enrolled {
			t.Errorf("ztunnel's PID now an app's listening on its ports: %+v, want the pod not enrolled (the ztunnel found is gone)", e.Pods)
		}
	})
}

// TestKubeMeshZtunnelsAreTheDaemonSetsPods: a process named ztunnel is a
// ztunnel only in a pod of the ztunnel DaemonSets in the Istio namespace on
// the node (or nodewise's surge bridge for one); the DaemonSets and the
// namespace are the agent's to set.
func TestKubeMeshZtunnelsAreTheDaemonSetsPods(t *testing.T) {
	yes := true
	owned := func(kind, name string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: "owner", Controller: &yes}}
			if kind == "Pod" {
				p.OwnerReferences[0].APIVersion = "v1"
			}
		}
	}
	bridge := func(ds string, mut func(*corev1.Pod)) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Labels = map[string]string{labelSurgeBridge: ds}
			if mut != nil {
				mut(p)
			}
		}
	}
	pods := []struct {
		ns   string
		mut  func(*corev1.Pod)
		want string // which set counts it: "default", "custom", "both" or ""
	}{
		{"istio-system", owned("DaemonSet", "ztunnel"), "default"},
		{"istio-system", bridge("ztunnel", owned("Pod", "ztunnel-old")), "default"},
		{"istio-system", bridge("ztunnel", nil), "default"}, // handed over, not adopted yet
		{"istio-system", owned("DaemonSet", "istio-cni-node"), ""},
		{"istio-system", owned("ReplicaSet", "ztunnel"), ""},
		{"istio-system", bridge("ztunnel", owned("ReplicaSet", "x")), ""},
		{"istio-system", func(p *corev1.Pod) { owned("DaemonSet", "ztunnel")(p); p.Spec.NodeName = "node-b" }, ""},
		{"shop", owned("DaemonSet", "ztunnel"), ""},
		{"shop", nil, ""}, // an app pod running its own "ztunnel"
		{"mesh", owned("DaemonSet", "ztunnel-canary"), "custom"},
		{"mesh", owned("DaemonSet", "ztunnel"), "custom"},
		{"mesh", bridge("ztunnel-canary", owned("Pod", "ztunnel-canary-old")), "custom"},
	}
	proc := procTree{t, t.TempDir()}
	var objs []runtime.Object
	want := map[string][]int{}
	for i, p := range pods {
		uid := fmt.Sprintf("0b6e1f2a-7777-4c3d-9e8f-%012d", i)
		pid := 1000 + i
		objs = append(objs, apiPod(p.ns, fmt.Sprintf("pod-%d", i), uid, p.mut))
		proc.add(pid, "ztunnel", fmt.Sprintf("0::/kubepods.slice/kubepods-pod%s.slice/cri-containerd-z.scope\n", strings.ReplaceAll(uid, "-", "_")), uint64(100+i), "S")
		if p.want != "" {
			want[p.want] = append(want[p.want], pid)
		}
	}
	for name, opts := range map[string][]KubeMeshOption{
		"default": nil,
		"custom":  {WithZtunnelDaemonSets(ZtunnelDaemonSets{Namespace: "mesh", DaemonSets: []string{"ztunnel", "ztunnel-canary"}})},
	} {
		z, err := startedKubeMesh(t, fake.NewClientset(objs...), proc.root, opts...).Ztunnels()
		if err != nil {
			t.Fatal(err)
		}
		got := append(append([]int(nil), z.Older...), z.Current)
		slices.Sort(got)
		if w := want[name]; !slices.Equal(got, w) || z.Current != w[len(w)-1] {
			t.Errorf("%s DaemonSets: ztunnels %+v, want the processes %v, the newest (%d) current", name, z, w, w[len(w)-1])
		}
	}
}

// TestProcCountersNotReadFromAReusedPID: proc mode reads a namespace's
// counters from a process the scan found in it. When that process exits and
// its PID goes to a process of another namespace before the read, that
// namespace's counts must not land on the first one's.
func TestProcCountersNotReadFromAReusedPID(t *testing.T) {
	r := netrig.New(t)
	quiet, busy := r.AddPod("quiet"), r.AddPod("busy")
	key := func(pid int) (uint32, error) { return nsInode(fmt.Sprintf("/proc/%d/net/snmp", pid)) }
	keyOf := func(p *netrig.Pod) (ns uint32) { // read from a thread in the namespace
		if err := p.Do(func() (err error) { ns, err = nsInode("/proc/thread-self/net/snmp"); return err }); err != nil {
			t.Fatal(err)
		}
		return ns
	}
	quietNS, busyNS := keyOf(quiet), keyOf(busy)
	inNS := func(cmd *exec.Cmd, ns uint32) {
		testkit.WaitFor(t, 10*time.Second, "the process in its namespace", func() (bool, error) {
			got, err := key(cmd.Process.Pid)
			return err == nil && got == ns, fmt.Errorf("process %d in namespace %d, want %d (%v)", cmd.Process.Pid, got, ns, err)
		})
	}
	scanned := spawn(t, quiet.Name, "", nil, false, "sleep", "1000000")
	inNS(scanned, quietNS)

	s := newProcSource("/proc")
	var between func() // runs between the scan and the read
	s.pids = func() (map[uint32]int, error) {
		if between != nil {
			between()
		}
		return map[uint32]int{quietNS: scanned.Process.Pid}, nil
	}
	if _, err := s.read(); err != nil {
		t.Fatal(err)
	}
	busy.ListenEcho(t, 9000, false)
	if err := busy.Do(func() error {
		for range 20 {
			c, err := net.Dial("tcp4", busy.IP.String()+":9000")
			if err != nil {
				return err
			}
			c.Close()
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	between = func() {
		kill(t, scanned)
		inNS(reusePID(t, scanned.Process.Pid, func() *exec.Cmd { return prepare(t, busy.Name, "", nil, "sleep", "1000000") }), busyNS)
	}
	rd, err := s.read()
	if err != nil {
		t.Fatal(err)
	}
	if c := rd.counters[bpf.Key{Netns: quietNS, Side: bpf.SideApp}]; c == nil || c.Connects != 0 || c.Accepts != 0 {
		t.Errorf("the quiet namespace, its scanned PID now a process of the busy one: %+v, want no connections (busy's are not its own)", c)
	}
}
