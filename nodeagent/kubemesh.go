package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
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
//   - the ztunnels are the processes named "ztunnel" in the cgroups of the
//     ztunnel DaemonSets' pods on the node (ZtunnelDaemonSets: their
//     namespace and names); the newest (by start time) serves the node. A
//     process of any other pod is never taken for one, whatever its name.
//
// It reads /proc anew on every call, so a restarted pod or a new ztunnel is
// seen at the next check, whatever the informers' lag.
type KubeMesh struct {
	node, procRoot string
	ztunnel        ZtunnelDaemonSets
	pods, nss      cache.SharedIndexInformer
	factories      []informers.SharedInformerFactory
}

// ZtunnelDaemonSets names the DaemonSets whose pods run the node's ztunnel:
// the NodeRollout targets of kind ztunnel (the chart's dataPlane.ztunnel).
type ZtunnelDaemonSets struct {
	Namespace  string   // default istio.DefaultNamespace
	DaemonSets []string // default ["ztunnel"], Istio's chart's name
}

// DefaultZtunnelDaemonSet is the name Istio's ztunnel chart gives its DaemonSet.
const DefaultZtunnelDaemonSet = "ztunnel"

// KubeMeshOption changes a KubeMesh's defaults.
type KubeMeshOption func(*KubeMesh)

// WithZtunnelDaemonSets sets the DaemonSets whose pods are the node's
// ztunnels (empty fields keep their defaults).
func WithZtunnelDaemonSets(z ZtunnelDaemonSets) KubeMeshOption {
	return func(m *KubeMesh) {
		if z.Namespace != "" {
			m.ztunnel.Namespace = z.Namespace
		}
		if len(z.DaemonSets) > 0 {
			m.ztunnel.DaemonSets = slices.Clone(z.DaemonSets)
		}
	}
}

// NewKubeMesh builds the source for node, reading processes under procRoot
// (the host's /proc). Start runs its informers.
func NewKubeMesh(client kubernetes.Interface, node, procRoot string, opts ...KubeMeshOption) (*KubeMesh, error) {
	if client == nil || node == "" || procRoot == "" {
		return nil, errors.New("the mesh source needs a Kubernetes client, the node name and the /proc to read")
	}
	onNode := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(trimMeshObject),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
		}))
	all := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(trimMeshObject))
	m := &KubeMesh{
		node: node, procRoot: procRoot,
		ztunnel:   ZtunnelDaemonSets{Namespace: istio.DefaultNamespace, DaemonSets: []string{DefaultZtunnelDaemonSet}},
		pods:      onNode.Core().V1().Pods().Informer(),
		nss:       all.Core().V1().Namespaces().Informer(),
		factories: []informers.SharedInformerFactory{onNode, all},
	}
	for _, o := range opts {
		o(m)
	}
	for _, ds := range m.ztunnel.DaemonSets {
		if ds == "" {
			return nil, errors.New("a ztunnel DaemonSet name is empty")
		}
	}
	return m, nil
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
// the pod names need: an agent on every node caches them. A pod keeps its
// owners (who they are and which controls it): they tell ztunnel's pods.
func trimMeshObject(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Name, UID: o.UID, Labels: o.Labels, ResourceVersion: o.ResourceVersion}}
		for _, r := range o.OwnerReferences {
			p.OwnerReferences = append(p.OwnerReferences, metav1.OwnerReference{APIVersion: r.APIVersion, Kind: r.Kind, Name: r.Name, UID: r.UID, Controller: r.Controller})
		}
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
	uids := map[string]bool{}
	for _, p := range pods {
		uids[string(p.UID)] = true
	}
	procs, err := scanPodProcs(m.procRoot, uids)
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

// Ztunnels implements MeshSource: the processes named ztunnel in the
// cgroups of the ztunnel DaemonSets' pods on the node (isZtunnelPod), the
// newest started serving the node. Each is known by its pod and start time
// too, so the check reads no other process that takes its PID later.
func (m *KubeMesh) Ztunnels() (Ztunnels, error) {
	if err := m.synced(); err != nil {
		return Ztunnels{}, err
	}
	uids := map[string]bool{}
	for _, o := range m.pods.GetStore().List() {
		if p := o.(*corev1.Pod); m.isZtunnelPod(p) {
			uids[string(p.UID)] = true
		}
	}
	if len(uids) == 0 {
		return Ztunnels{}, nil
	}
	procs, err := scanPodProcs(m.procRoot, uids)
	if err != nil {
		return Ztunnels{}, err
	}
	type zt struct {
		pid int
		id  procID
	}
	var found []zt
	for _, ps := range procs {
		for _, p := range ps {
			if p.comm == ztunnelComm && p.alive { // a zombie has no sockets left
				found = append(found, zt{p.pid, p.id})
			}
		}
	}
	sort.Slice(found, func(i, j int) bool {
		if found[i].id.start != found[j].id.start {
			return found[i].id.start > found[j].id.start
		}
		return found[i].pid > found[j].pid
	})
	var z Ztunnels
	for i, f := range found {
		if z.procs == nil {
			z.procs = map[int]procID{}
		}
		z.procs[f.pid] = f.id
		if i == 0 {
			z.Current = f.pid
			continue
		}
		z.Older = append(z.Older, f.pid)
	}
	sort.Ints(z.Older)
	return z, nil
}

// isZtunnelPod: a pod on the node in the Istio namespace that one of the
// ztunnel DaemonSets controls, or nodewise's surge bridge for one of them
// (orchestrator/swap: the DaemonSet's next pod, controlled by the node's
// older one until the DaemonSet adopts it). Pods in that namespace are
// created only by the DaemonSet controller, nodewise's orchestrator and
// cluster admins; a process in any other pod is never a ztunnel, whatever
// its name.
func (m *KubeMesh) isZtunnelPod(p *corev1.Pod) bool {
	if p.Namespace != m.ztunnel.Namespace || p.Spec.NodeName != m.node {
		return false
	}
	c := metav1.GetControllerOf(p)
	if c != nil && c.Kind == "DaemonSet" && strings.HasPrefix(c.APIVersion, "apps/") {
		return slices.Contains(m.ztunnel.DaemonSets, c.Name)
	}
	ds, bridge := p.Labels[labelSurgeBridge]
	return bridge && slices.Contains(m.ztunnel.DaemonSets, ds) && (c == nil || c.Kind == "Pod")
}

// labelSurgeBridge marks nodewise's surge bridges with the DaemonSet they
// stand for (orchestrator/model.LabelSurgeBridge).
const labelSurgeBridge = "nodewise.io/surge-bridge"

// podProc is a process that runs in a pod's cgroup.
type podProc struct {
	pid   int
	comm  string
	id    procID
	alive bool
}

// scanPodProcs maps the pod UIDs in uids to the processes that run in their
// cgroups, each read through its /proc directory (one process's name, pod
// and start time, even if its PID changes hands during the scan).
// Processes that exit during the scan are left out.
func scanPodProcs(root string, uids map[string]bool) (map[string][]podProc, error) {
	out := map[string][]podProc{}
	err := eachPodProcess(root, func(d *procDir, uid string) {
		if !uids[uid] {
			return
		}
		id, alive, err := d.identify()
		if err != nil || id.uid != uid {
			return // exited since
		}
		comm, err := d.readFile("comm")
		if err != nil {
			return
		}
		out[uid] = append(out[uid], podProc{pid: d.pid, comm: strings.TrimSpace(string(comm)), id: id, alive: alive})
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
