package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

// procTree writes a /proc tree: each process's cgroup, comm and stat.
type procTree struct {
	t    *testing.T
	root string
}

func (f procTree) add(pid int, comm, cgroup string, start uint64, state string) {
	f.t.Helper()
	dir := filepath.Join(f.root, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
	// The name holds a space and a ')' to check the stat parser.
	stat := fmt.Sprintf("%d (%s) x) %s 1 1 1 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 %d 1000 10\n", pid, comm, state, start)
	for name, content := range map[string]string{"cgroup": cgroup, "comm": comm + "\n", "stat": stat} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			f.t.Fatal(err)
		}
	}
}

const (
	uidPause    = "0b6e1f2a-1111-4c3d-9e8f-000000000001"
	uidSystemd  = "0b6e1f2a-2222-4c3d-9e8f-000000000002"
	uidNoProc   = "0b6e1f2a-3333-4c3d-9e8f-000000000003"
	uidZtunnel  = "0b6e1f2a-4444-4c3d-9e8f-000000000004"
	uidZtunnel2 = "0b6e1f2a-5555-4c3d-9e8f-000000000005"
	uidNsOnly   = "0b6e1f2a-6666-4c3d-9e8f-000000000006"
)

func apiPod(ns, name, uid string, mut func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)},
		Spec:       corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "app", Image: "app:1"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if mut != nil {
		mut(p)
	}
	return p
}

// ztunnelAPIPod is a pod in istio-system on node-a that DaemonSet ds controls.
func ztunnelAPIPod(name, uid, ds string) *corev1.Pod {
	return apiPod("istio-system", name, uid, func(p *corev1.Pod) {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds, UID: "ds-uid", Controller: &yes}}
	})
}

func label(k, v string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Labels = map[string]string{k: v} }
}

// TestKubeMeshFindsAmbientPodsAndTheirNetns applies Istio's rule to a fake
// API and maps each pod to a process of a fake /proc by its cgroup: cgroupfs
// (v1, every controller), systemd (v2, underscores, a path relative to the
// agent's cgroup namespace), and a pod with no process.
func TestKubeMeshFindsAmbientPodsAndTheirNetns(t *testing.T) {
	proc := procTree{t, t.TempDir()}
	v1 := func(uid, cid string) string {
		return fmt.Sprintf("12:pids:/kubepods/besteffort/pod%s/%s\n4:memory:/kubepods/besteffort/pod%s/%s\n0::/\n", uid, cid, uid, cid)
	}
	v2 := func(uid, cid string) string {
		u := strings.ReplaceAll(uid, "-", "_")
		return fmt.Sprintf("0::/../../kubepods-burstable.slice/kubepods-burstable-pod%s.slice/cri-containerd-%s.scope\n", u, cid)
	}
	proc.add(90, "app", v1(uidPause, "c2"), 100, "S") // a lower PID than the sandbox's: pause still wins
	proc.add(100, "pause", v1(uidPause, "c1"), 100, "S")
	proc.add(205, "app", v2(uidSystemd, "c4"), 100, "S")
	proc.add(201, "sh", v2(uidSystemd, "c3"), 100, "S")
	proc.add(1, "systemd", "0::/init.scope\n", 1, "S")
	proc.add(300, "ztunnel", v2(uidZtunnel, "z1"), 5000, "S")
	proc.add(310, "ztunnel", v1(uidZtunnel2, "z2"), 9000, "S")
	proc.add(320, "ztunnel", v1(uidZtunnel2, "z3"), 9900, "Z") // a zombie: its sockets are gone
	proc.add(330, "ztunnel", "0::/user.slice/session-1.scope\n", 9999, "S")
	proc.add(340, "ztunnel-helper", v1(uidZtunnel2, "z4"), 9999, "S")

	ambientNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"istio.io/dataplane-mode": "ambient"}}}
	plainNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "plain"}}
	objs := []runtime.Object{ambientNS, plainNS,
		apiPod("shop", "pause-pod", uidPause, nil),
		apiPod("shop", "systemd-pod", uidSystemd, nil),
		apiPod("plain", "labelled-pod", uidNoProc, label("istio.io/dataplane-mode", "ambient")),
		apiPod("plain", "plain-pod", "u-plain", nil),
		apiPod("shop", "opted-out", "u-none", label("istio.io/dataplane-mode", "none")),
		apiPod("shop", "waypoint", "u-wp", label("gateway.istio.io/managed", "istio.io-mesh-controller")),
		apiPod("shop", "gateway", "u-gw", label("istio.io/gateway-name", "waypoint")),
		apiPod("shop", "host-net", "u-host", func(p *corev1.Pod) { p.Spec.HostNetwork = true }),
		apiPod("shop", "pending", "u-pending", func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }),
		apiPod("shop", "sidecar", "u-sidecar", func(p *corev1.Pod) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "istio-proxy"})
		}),
		apiPod("shop", "native-sidecar", "u-native", func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{{Name: "istio-proxy"}}
		}),
		// The fake clientset ignores field selectors: the source must still
		// keep only its node's pods.
		apiPod("shop", "elsewhere", uidNsOnly, func(p *corev1.Pod) { p.Spec.NodeName = "node-b" }),
		// The ztunnel DaemonSet's pods, whose processes named ztunnel are
		// the node's ztunnels.
		ztunnelAPIPod("ztunnel-a", uidZtunnel, "ztunnel"),
		ztunnelAPIPod("ztunnel-b", uidZtunnel2, "ztunnel"),
	}
	km, err := NewKubeMesh(fake.NewClientset(objs...), "node-a", proc.root)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := km.AmbientPods(); err == nil || !strings.Contains(err.Error(), "not listed yet") {
		t.Errorf("before the informers list: %v, want an error (not an empty node)", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := km.Start(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	got, err := km.AmbientPods()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]MeshPod{}
	for _, p := range got {
		byName[p.Namespace+"/"+p.Name] = p
	}
	want := map[string]MeshPod{
		"shop/pause-pod":     {Pod: Pod{Namespace: "shop", Name: "pause-pod", UID: uidPause}, Netns: filepath.Join(proc.root, "100", "ns", "net")},
		"shop/systemd-pod":   {Pod: Pod{Namespace: "shop", Name: "systemd-pod", UID: uidSystemd}, Netns: filepath.Join(proc.root, "201", "ns", "net")},
		"plain/labelled-pod": {Pod: Pod{Namespace: "plain", Name: "labelled-pod", UID: uidNoProc}, NoNetns: "no process under " + proc.root + " runs in a cgroup of pod " + uidNoProc},
	}
	if !reflect.DeepEqual(byName, want) {
		t.Errorf("ambient pods:\n got %+v\nwant %+v", byName, want)
	}

	z, err := km.Ztunnels()
	if err != nil {
		t.Fatal(err)
	}
	if z.Current != 310 || !reflect.DeepEqual(z.Older, []int{300}) {
		t.Errorf("ztunnels %+v, want current 310 (the newest running in a pod), older [300]", z)
	}

	names, err := km.PodsByUID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p := names[uidSystemd]; p != (Pod{Namespace: "shop", Name: "systemd-pod", UID: uidSystemd}) || len(names) != len(objs)-2 {
		t.Errorf("pods by UID: %d pods, %s → %+v", len(names), uidSystemd, p)
	}
}

// A /proc that cannot be listed makes the answer an error, so the
// enrollment is an error (the gate fails closed), not a node of uncheckable pods.
func TestKubeMeshUnreadableProc(t *testing.T) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"istio.io/dataplane-mode": "ambient"}}}
	km := startedKubeMesh(t, fake.NewClientset(ns, apiPod("shop", "p", uidPause, nil)), filepath.Join(t.TempDir(), "missing"))
	e := CheckEnrollment(km, km.procRoot, time.Now())
	if !strings.Contains(e.Error, "listing "+km.procRoot) {
		t.Errorf("enrollment error %q, want the /proc listing's", e.Error)
	}
	if _, err := NewKubeMesh(nil, "node-a", "/proc"); err == nil {
		t.Error("a mesh source without a client was built")
	}
}
