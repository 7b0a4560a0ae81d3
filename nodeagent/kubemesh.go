package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/istio/inventory"
)

// ztunnelComm is the process name (/proc/<pid>/comm) of Istio's ztunnel.
const ztunnelComm = "ztunnel"

// KubeMesh is the production MeshSource (docs/enrollment.md), and the
// PodLister that names the node's pods:
//   - the node's pods and all namespaces come from the Kubernetes API, through
//     two informers (pods with the field selector spec.nodeName=<node>);
//   - an ambient pod (istio.Ambient, Running, not hostNetwork, no sidecar)
//     gets the network namespace of one of its processes: the process whose
//     /proc/<pid>/cgroup names the pod's UID (cgroupfs "pod<uid>" or systemd
//     "pod<uid_with_underscores>.slice", cgroup v1 or v2), the sandbox's
//     pause process when it is seen, /proc/<pid>/ns/net under ProcRoot;
//   - the ztunnels are the processes named "ztunnel" that run in a pod's
//     cgroup; the newest (by start time) serves the node.
//
// It reads /proc anew on every call, so a restarted pod or a new ztunnel is
// seen at the next check, whatever the informers' lag.
type KubeMesh struct {
	node, procRoot string
	pods, nss      cache.SharedIndexInformer
	factories      []informers.SharedInformerFactory
}

// NewKubeMesh builds the source for node, reading processes under procRoot
// (the host's /proc). Start runs its informers.
func NewKubeMesh(client kubernetes.Interface, node, procRoot string) (*KubeMesh, error) {
	if client == nil || node == "" || procRoot == "" {
		return nil, errors.New("the mesh source needs a Kubernetes client, the node name and the /proc to read")
	}
	onNode := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(trimMeshObject),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
		}))
	all := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(trimMeshObject))
	return &KubeMesh{
		node: node, procRoot: procRoot,
		pods:      onNode.Core().V1().Pods().Informer(),
		nss:       all.Core().V1().Namespaces().Informer(),
		factories: []informers.SharedInformerFactory{onNode, all},
	}, nil
}

// Start runs the informers until ctx ends and waits up to wait for their
// first lists; until then every answer is an error (not an empty node).
func (m *KubeMesh) Start(ctx context.Context, wait time.Duration) error {
	for _, f := range m.factories {
		f.Start(ctx.Done())
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if !cache.WaitForCacheSync(wctx.Done(), m.pods.HasSynced, m.nss.HasSynced) {
		return fmt.Errorf("the node's pods and the namespaces are not listed after %s", wait)
	}
	return nil
}

func (m *KubeMesh) synced() error {
	if !m.pods.HasSynced() || !m.nss.HasSynced() {
		return errors.New("the node's pods and the namespaces are not listed yet")
	}
	return nil
}

// trimMeshObject keeps of pods and namespaces only what the mesh source and
// the pod names need: an agent on every node caches them.
func trimMeshObject(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name, UID: o.UID, Labels: o.Labels, ResourceVersion: o.ResourceVersion}}
		p.Spec.NodeName, p.Spec.HostNetwork = o.Spec.NodeName, o.Spec.HostNetwork
		for _, c := range o.Spec.Containers {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: c.Name})
		}
		for _, c := range o.Spec.InitContainers {
			p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: c.Name})
		}
		p.Status.Phase = o.Status.Phase
		return p, nil
	case *corev1.Namespace:
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.Name, UID: o.UID, Labels: o.Labels, ResourceVersion: o.ResourceVersion}}, nil
	}
	return obj, nil
}

// PodsByUID implements PodLister from the informer's cache.
func (m *KubeMesh) PodsByUID(context.Context) (map[string]Pod, error) {
	if err := m.synced(); err != nil {
		return nil, err
	}
	out := map[string]Pod{}
	for _, o := range m.pods.GetStore().List() {
		p := o.(*corev1.Pod)
		out[string(p.UID)] = Pod{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}
	}
	return out, nil
}

// AmbientPods implements MeshSource: the node's Running pods Istio puts in
// ambient, each with its network namespace, or why it has none.
func (m *KubeMesh) AmbientPods() ([]MeshPod, error) {
	if err := m.synced(); err != nil {
		return nil, err
	}
	var pods []*corev1.Pod
	for _, o := range m.pods.GetStore().List() {
		p := o.(*corev1.Pod)
		if p.Spec.NodeName != m.node || p.Status.Phase != corev1.PodRunning || p.Spec.HostNetwork || inventory.HasSidecar(p) {
			continue
		}
		var nsLabels map[string]string
		if o, ok, _ := m.nss.GetStore().GetByKey(p.Namespace); ok {
			nsLabels = o.(*corev1.Namespace).Labels
		}
		if in, _ := istio.Ambient(nsLabels, p.Labels); in {
			pods = append(pods, p)
		}
	}
	if len(pods) == 0 {
		return nil, nil
	}
	procs, err := scanPodProcs(m.procRoot)
	if err != nil {
		return nil, err
	}
	out := make([]MeshPod, 0, len(pods))
	for _, p := range pods {
		mp := MeshPod{Pod: Pod{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID)}}
		if pid := sandboxPID(procs[string(p.UID)]); pid != 0 {
			mp.Netns = filepath.Join(m.procRoot, strconv.Itoa(pid), "ns", "net")
		} else {
			mp.NoNetns = fmt.Sprintf("no process under %s runs in a cgroup of pod %s", m.procRoot, p.UID)
		}
		out = append(out, mp)
	}
	return out, nil
}

// Ztunnels implements MeshSource: the processes named ztunnel in a pod's
// cgroup, the newest started serving the node.
func (m *KubeMesh) Ztunnels() (Ztunnels, error) {
	procs, err := scanPodProcs(m.procRoot)
	if err != nil {
		return Ztunnels{}, err
	}
	type zt struct {
		pid   int
		start uint64
	}
	var found []zt
	for _, ps := range procs {
		for _, p := range ps {
			if p.comm != ztunnelComm {
				continue
			}
			start, alive, err := procStart(m.procRoot, p.pid)
			if err != nil || !alive {
				continue // exited since the scan, or a zombie: no sockets left
			}
			found = append(found, zt{p.pid, start})
		}
	}
	sort.Slice(found, func(i, j int) bool {
		if found[i].start != found[j].start {
			return found[i].start > found[j].start
		}
		return found[i].pid > found[j].pid
	})
	var z Ztunnels
	for i, f := range found {
		if i == 0 {
			z.Current = f.pid
			continue
		}
		z.Older = append(z.Older, f.pid)
	}
	sort.Ints(z.Older)
	return z, nil
}

// podProc is a process that runs in a pod's cgroup.
type podProc struct {
	pid  int
	comm string
}

// scanPodProcs maps each pod UID named by a process's cgroup to its
// processes. Processes that exit during the scan are left out.
func scanPodProcs(root string) (map[string][]podProc, error) {
	out := map[string][]podProc{}
	err := eachPodProcess(root, func(pid int, dir, uid string) {
		comm, err := os.ReadFile(filepath.Join(dir, "comm"))
		if err != nil {
			return
		}
		out[uid] = append(out[uid], podProc{pid: pid, comm: strings.TrimSpace(string(comm))})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// sandboxPID picks the process whose namespace is the pod's: the sandbox's
// pause process when there is one, else the lowest PID (every container of
// a pod without hostNetwork shares the sandbox's network namespace).
func sandboxPID(ps []podProc) int {
	best := 0
	for _, p := range ps {
		if p.comm == "pause" {
			return p.pid
		}
		if best == 0 || p.pid < best {
			best = p.pid
		}
	}
	return best
}

// procStart reads a process's start time (clock ticks after boot, field 22
// of /proc/<pid>/stat) and whether it still runs (not a zombie).
func procStart(root string, pid int) (uint64, bool, error) {
	b, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, false, err
	}
	s := string(b)
	// The name in parentheses may hold spaces and parentheses: the fields
	// start after the last ')'.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false, fmt.Errorf("%d/stat: no process name", pid)
	}
	fs := strings.Fields(s[i+1:])
	if len(fs) < 20 { // state is field 3, starttime field 22
		return 0, false, fmt.Errorf("%d/stat: %d fields", pid, len(fs)+2)
	}
	start, err := strconv.ParseUint(fs[19], 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("%d/stat: start time %q", pid, fs[19])
	}
	return start, fs[0] != "Z" && fs[0] != "X", nil
}
