package dataplane

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodewise/nodewise/probe"
	"github.com/nodewise/nodewise/sim/cluster"
)

// Config configures a DataPlane. Zero values get defaults.
type Config struct {
	// StandinArgv starts a ztunnel stand-in process: a program that calls
	// RunStandin when StandinEnv is set (required).
	StandinArgv []string
	// StandinLog receives the stand-ins' stderr (default: discarded).
	StandinLog io.Writer
	// Traffic shapes the app pods' clients.
	Traffic Traffic
	// Log is the data plane's logger (default: no-op).
	Log *zap.Logger
}

// DataPlane is the live data plane: a cluster.Runtime for the simulated kubelet.
type DataPlane struct {
	cfg    Config
	prefix string
	fab    *fabric
	log    *zap.Logger
	// cniRoot holds each node's CNI conf and bin dirs (CNIDirs).
	cniRoot string

	mu        sync.Mutex
	client    kubernetes.Interface
	api       *rest.Config // the API server istio-cni's stand-in names in its kubeconfig
	ambientNS map[string]bool
	cniUp     map[string]bool               // node → istio-cni stand-in running
	cniTag    map[string]string             // node → the image tag of its istio-cni stand-in, last started
	standins  map[types.UID]*standinProc    // ztunnel pod → its process
	connects  int                           // stand-ins started so far: their connection order
	pods      map[types.UID]*podSandbox     // app and probe pods
	byNode    map[string]map[types.UID]bool // node → app and probe pods
	gone      map[string]Truth              // ground truth of app pods that stopped, by namespace/name
	next      int

	load *load // every client's pace (TrafficSurge)

	// procs is every stand-in process running (ztunnels and sidecars),
	// and starting counts the ones still coming up: Close waits for those,
	// then kills them all, so none outlives the data plane.
	procs    map[*standinProc]bool
	starting sync.WaitGroup
	// closed is set by Close: nothing starts after it.
	closed bool
}

// errClosed is a start refused because the data plane is closing.
var errClosed = errors.New("the data plane is closed")

// podSandbox is one app pod's namespace, veth leg and app, or a probe pod's
// namespace, veth leg and probe.
type podSandbox struct {
	key, node, netns, leg, ip string
	ambient                   bool
	// sidecar is the pod's own proxy stand-in when it was injected (an
	// istio-proxy container): it intercepts the app's traffic in the pod's
	// namespace as Envoy's redirect does, with the behaviour of its image tag.
	sidecar  *standinProc
	app      *app
	probeCfg *probe.Config // a probe pod: what its command line asks for
	probe    *probeRun
	stopping bool // deleted: its endpoints are gone, clients no longer pick it
}

// New creates the fabric namespace. Close removes everything New and the
// runtime created.
func New(cfg Config) (*DataPlane, error) {
	if len(cfg.StandinArgv) == 0 {
		return nil, errors.New("dataplane: StandinArgv: required")
	}
	cfg.Traffic.defaults()
	if cfg.StandinLog == nil {
		cfg.StandinLog = io.Discard
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	b := make([]byte, 3)
	if _, err := crand.Read(b); err != nil {
		return nil, err
	}
	d := &DataPlane{
		cfg: cfg, prefix: "nwdp" + hex.EncodeToString(b), log: cfg.Log,
		ambientNS: map[string]bool{}, cniUp: map[string]bool{}, cniTag: map[string]string{}, standins: map[types.UID]*standinProc{}, procs: map[*standinProc]bool{},
		pods: map[types.UID]*podSandbox{}, byNode: map[string]map[types.UID]bool{}, gone: map[string]Truth{},
		load: &load{},
	}
	fab, err := newFabric(d.prefix + "-fabric")
	if err != nil {
		_ = delNetns(d.prefix + "-fabric")
		return nil, err
	}
	d.fab = fab
	if d.cniRoot, err = os.MkdirTemp("", d.prefix+"-cni-"); err != nil {
		_ = delNetns(d.prefix + "-fabric")
		return nil, err
	}
	return d, nil
}

// Prefix is the name prefix of every namespace the data plane creates.
func (d *DataPlane) Prefix() string { return d.prefix }

type podKind int

const (
	kindOther podKind = iota
	kindCNI
	kindZtunnel
	kindApp
	kindProbe // a pod of the nodewise-probe DaemonSet
)

func kindOf(pod *corev1.Pod) podKind {
	switch {
	case pod.Namespace == cluster.IstioNamespace && pod.Labels["k8s-app"] == cluster.CNIName:
		return kindCNI
	case pod.Namespace == cluster.IstioNamespace && (pod.Labels["app"] == "ztunnel" || runsZtunnel(pod)):
		// A surge bridge pod (orchestrator/surge.go) runs ztunnel without
		// the DaemonSet's selector labels until the DaemonSet adopts it.
		return kindZtunnel
	case pod.Namespace == cluster.IstioNamespace || pod.Namespace == metav1.NamespaceSystem || pod.Spec.HostNetwork:
		return kindOther
	case isProbePod(pod):
		return kindProbe
	}
	return kindApp
}

// sidecarTag is the image tag of an injected pod's istio-proxy container.
func sidecarTag(pod *corev1.Pod) (string, bool) {
	for _, c := range pod.Spec.Containers {
		if c.Name == "istio-proxy" {
			if i := strings.LastIndex(c.Image, ":"); i >= 0 {
				return c.Image[i+1:], true
			}
			return "", true
		}
	}
	return "", false
}

// namespaceOf is the namespace of a namespace/name key.
func namespaceOf(key string) string {
	ns, _, _ := strings.Cut(key, "/")
	return ns
}

// runsZtunnel reports whether a pod's first container is a ztunnel image.
func runsZtunnel(pod *corev1.Pod) bool {
	if len(pod.Spec.Containers) == 0 {
		return false
	}
	image := pod.Spec.Containers[0].Image
	if i := strings.LastIndex(image, ":"); i >= 0 {
		image = image[:i]
	}
	return strings.HasSuffix(image, "/ztunnel")
}

// Start implements cluster.Runtime.
func (d *DataPlane) Start(ctx context.Context, pod *corev1.Pod, podIP string) error {
	switch kindOf(pod) {
	case kindCNI:
		if err := d.installCNI(ctx, pod); err != nil {
			return err
		}
		d.mu.Lock()
		d.cniUp[pod.Spec.NodeName] = true
		d.cniTag[pod.Spec.NodeName] = imageTag(pod)
		d.mu.Unlock()
		_, err := d.readdPods(pod.Spec.NodeName, imageTag(pod))
		return err
	case kindZtunnel:
		return d.startZtunnel(pod)
	case kindApp, kindProbe:
		if ip := net.ParseIP(podIP); !pod.Spec.HostNetwork && (ip == nil || !livePodRange.Contains(ip)) {
			return fmt.Errorf("pod %s/%s: IP %q is outside the live data plane's %s (it holds the first 256 nodes' pod CIDRs)", pod.Namespace, pod.Name, podIP, podRange)
		}
		return d.startApp(ctx, pod, podIP)
	}
	return nil
}

var livePodRange = func() *net.IPNet {
	_, n, err := net.ParseCIDR(podRange)
	if err != nil {
		panic(err)
	}
	return n
}()

// Stop implements cluster.Runtime.
func (d *DataPlane) Stop(ctx context.Context, pod *corev1.Pod) {
	switch kindOf(pod) {
	case kindCNI:
		d.mu.Lock()
		d.cniUp[pod.Spec.NodeName] = false
		d.mu.Unlock()
	case kindZtunnel:
		d.mu.Lock()
		p := d.standins[pod.UID]
		d.mu.Unlock()
		if p != nil {
			start := time.Now()
			p.terminate(ctx)
			d.forget(p)
			d.log.Debug("ztunnel stand-in stopped", zap.String("pod", p.pod), zap.String("node", p.node), zap.Duration("took", time.Since(start)))
			d.mu.Lock()
			delete(d.standins, pod.UID)
			d.mu.Unlock()
		}
	case kindApp, kindProbe:
		d.stopApp(ctx, pod.UID)
	}
}

// spawn starts a stand-in process (a ztunnel, or a pod's sidecar) and keeps
// it in d.procs until forget, so Close can kill it whatever its owner does.
func (d *DataPlane) spawn(env []string, node, pod string) (*standinProc, error) {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, errClosed
	}
	d.starting.Add(1)
	d.mu.Unlock()
	defer d.starting.Done()
	p, err := startStandin(d.cfg.StandinArgv, env, d.cfg.StandinLog, node, pod)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.procs[p] = true
	d.mu.Unlock()
	return p, nil
}

// forget drops a stand-in that has exited from d.procs.
func (d *DataPlane) forget(p *standinProc) {
	d.mu.Lock()
	delete(d.procs, p)
	d.mu.Unlock()
}

// startZtunnel starts the node's new stand-in and hands it every ambient pod
// already on the node, as istio-cni does when ztunnel connects.
func (d *DataPlane) startZtunnel(pod *corev1.Pod) error {
	d.mu.Lock()
	if _, ok := d.standins[pod.UID]; ok {
		d.mu.Unlock()
		return nil
	}
	d.mu.Unlock()
	var env []string
	tag := ""
	for _, c := range pod.Spec.Containers {
		if i := strings.LastIndex(c.Image, ":"); i >= 0 {
			tag = c.Image[i+1:]
		}
		for _, e := range c.Env {
			if e.Name == graceEnv && e.Value != "" {
				env = append(env, graceEnv+"="+e.Value)
			}
		}
	}
	env = append(env, tagEnv+"="+tag)
	p, err := d.spawn(env, pod.Spec.NodeName, pod.Namespace+"/"+pod.Name)
	if err != nil {
		return err
	}
	d.mu.Lock()
	if d.closed { // Close kills p: it is in d.procs
		d.mu.Unlock()
		return errClosed
	}
	d.connects++
	p.connected = d.connects
	d.standins[pod.UID] = p
	var netns []string
	for uid := range d.byNode[pod.Spec.NodeName] {
		if sb := d.pods[uid]; sb.ambient {
			netns = append(netns, sb.netns)
		}
	}
	d.mu.Unlock()
	for _, ns := range netns {
		if err := p.command("add", ns); err != nil {
			d.log.Warn("ztunnel stand-in could not listen in a pod", zap.String("netns", ns), zap.Error(err))
		}
	}
	d.log.Debug("ztunnel stand-in started", zap.String("pod", p.pod), zap.String("node", p.node), zap.String("tag", tag))
	return nil
}

// newestStandin is the node's most recently connected stand-in that is not
// draining, or nil. Like istio-cni, which hands a new pod only to the
// ztunnel that connected last, the data plane hands new pods to it alone:
// an older stand-in keeps the pods it already serves until it is told to
// drain, and never learns of newer ones.
func (d *DataPlane) newestStandin(node string) *standinProc {
	var newest *standinProc
	for _, p := range d.standins {
		if p.node == node && !p.isTerminating() && (newest == nil || p.connected > newest.connected) {
			newest = p
		}
	}
	return newest
}

func (d *DataPlane) isAmbient(ctx context.Context, ns string) (bool, error) {
	d.mu.Lock()
	client := d.client
	amb, known := d.ambientNS[ns]
	d.mu.Unlock()
	if known {
		return amb, nil
	}
	if client == nil {
		return false, errors.New("data plane not attached to the API yet")
	}
	n, err := client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("reading namespace %s: %w", ns, err)
	}
	amb = n.Labels["istio.io/dataplane-mode"] == "ambient"
	d.mu.Lock()
	d.ambientNS[ns] = amb
	d.mu.Unlock()
	return amb, nil
}

// startApp builds the pod's sandbox (an app pod's, or a probe pod's). Like a real node with istio-cni, it
// refuses (the pod stays in ContainerCreating) while the node's istio-cni is
// down, or, for an ambient pod, while no ztunnel serves the node.
func (d *DataPlane) startApp(ctx context.Context, pod *corev1.Pod, podIP string) error {
	node := pod.Spec.NodeName
	ambient, err := d.isAmbient(ctx, pod.Namespace)
	if err != nil {
		return err
	}
	var probeCfg *probe.Config
	if kindOf(pod) == kindProbe {
		cfg, err := probeArgs(pod)
		if err != nil {
			return err
		}
		probeCfg = &cfg
	}
	d.mu.Lock()
	if _, ok := d.pods[pod.UID]; ok {
		d.mu.Unlock()
		return nil
	}
	if !d.cniUp[node] {
		d.mu.Unlock()
		return fmt.Errorf("istio-cni is not running on node %s", node)
	}
	var zts []*standinProc
	if p := d.newestStandin(node); p != nil {
		zts = append(zts, p)
	}
	if ambient && len(zts) == 0 {
		d.mu.Unlock()
		return fmt.Errorf("no ztunnel serves node %s", node)
	}
	d.next++
	sb := &podSandbox{key: pod.Namespace + "/" + pod.Name, node: node, ip: podIP, ambient: ambient, probeCfg: probeCfg,
		netns: fmt.Sprintf("%s-p%d", d.prefix, d.next), leg: fmt.Sprintf("v%d", d.next)}
	d.mu.Unlock()
	if tag, ok := sidecarTag(pod); ok && !ambient {
		p, err := d.spawn([]string{tagEnv + "=" + tag}, node, sb.key)
		if err != nil {
			return fmt.Errorf("pod %s: its sidecar: %w", sb.key, err)
		}
		sb.sidecar = p
	}
	if err := d.buildSandbox(sb, zts); err != nil {
		d.teardown(sb)
		return err
	}
	d.mu.Lock()
	d.pods[pod.UID] = sb
	if d.byNode[node] == nil {
		d.byNode[node] = map[types.UID]bool{}
	}
	d.byNode[node][pod.UID] = true
	d.mu.Unlock()
	return nil
}

func (d *DataPlane) buildSandbox(sb *podSandbox, zts []*standinProc) error {
	if err := addNetns(sb.netns); err != nil {
		return err
	}
	if err := d.fab.attach(sb.netns, sb.leg, sb.ip); err != nil {
		return err
	}
	if sb.sidecar != nil {
		zts = []*standinProc{sb.sidecar}
	}
	meshed := sb.ambient || sb.sidecar != nil
	// An ambient pod is enrolled by istio-cni (its rules, then ztunnel told
	// of it; a sidecar's rules are its init container's): a -noadd build
	// does neither.
	if meshed && (sb.sidecar != nil || !d.cniAddsNone(sb.node)) {
		if err := installRedirect(sb.netns); err != nil {
			return err
		}
		for _, p := range zts {
			if err := p.command("add", sb.netns); err != nil {
				return err
			}
		}
	}
	if sb.probeCfg != nil {
		r, err := d.startProbe(sb, *sb.probeCfg)
		if err != nil {
			return err
		}
		sb.probe = r
		return nil
	}
	a, err := startApp(sb.netns, sb.ip, meshed, d.cfg.Traffic, d.load, d.pickTarget, d.gonePod)
	if err != nil {
		return err
	}
	sb.app = a
	return nil
}

func (d *DataPlane) teardown(sb *podSandbox) {
	d.mu.Lock()
	var zts []*standinProc
	for _, p := range d.standins {
		if p.node == sb.node {
			zts = append(zts, p)
		}
	}
	d.mu.Unlock()
	for _, p := range zts {
		_ = p.command("del", sb.netns)
	}
	if sb.sidecar != nil {
		sb.sidecar.kill() // after the app: the pod's own proxy goes with it
		d.forget(sb.sidecar)
	}
	_ = d.fab.detach(sb.leg)
	if err := delNetns(sb.netns); err != nil {
		d.log.Warn("removing pod namespace", zap.String("netns", sb.netns), zap.Error(err))
	}
}

func (d *DataPlane) stopApp(ctx context.Context, uid types.UID) {
	d.mu.Lock()
	sb := d.pods[uid]
	d.mu.Unlock()
	if sb == nil {
		return
	}
	d.mu.Lock()
	sb.stopping = true // its endpoints are removed
	d.mu.Unlock()
	if pre := d.cfg.Traffic.PreStop; pre > 0 {
		// preStop: keep serving until the clients have stopped picking the
		// pod (no endpoints), bounded by the grace period.
		select {
		case <-ctx.Done():
		case <-time.After(pre):
		}
	}
	if sb.probe != nil {
		sb.probe.stop(ctx)
	} else {
		sb.app.stop(ctx)
	}
	d.teardown(sb)
	d.mu.Lock()
	delete(d.pods, uid)
	delete(d.byNode[sb.node], uid)
	if sb.app != nil {
		d.gone[sb.key] = d.gone[sb.key].Add(sb.app.truth.load())
	}
	d.mu.Unlock()
}

// pickTarget returns the IP of a random app pod other than self: for an
// ambient pod, any ambient pod; for a pod with a sidecar, a pod with a
// sidecar in its own namespace (a service calling its own peers), so a faulty
// proxy in one namespace does not reach the callers in another.
func (d *DataPlane) pickTarget(self string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var me *podSandbox
	for _, sb := range d.pods {
		if sb.ip == self {
			me = sb
		}
	}
	var ips []string
	for _, sb := range d.pods {
		if sb.ip == self || sb.app == nil || (sb.stopping && d.cfg.Traffic.PreStop >= 0) {
			continue
		}
		if me != nil && me.sidecar != nil {
			if sb.sidecar != nil && namespaceOf(sb.key) == namespaceOf(me.key) {
				ips = append(ips, sb.ip)
			}
		} else if sb.ambient {
			ips = append(ips, sb.ip)
		}
	}
	if len(ips) == 0 {
		return ""
	}
	return ips[rand.IntN(len(ips))]
}

// gonePod reports whether no running pod that is not stopping has ip: a
// request to it failed because of an eviction (or deletion).
func (d *DataPlane) gonePod(ip string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, sb := range d.pods {
		if sb.ip == ip && !sb.stopping {
			return false
		}
	}
	return true
}

// Truth returns every app pod's ground truth so far, by namespace/name
// (pods that stopped included), and the total.
func (d *DataPlane) Truth() (map[string]Truth, Truth) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string]Truth{}
	var total Truth
	for k, t := range d.gone {
		out[k] = t
	}
	for _, sb := range d.pods {
		if sb.app != nil {
			out[sb.key] = out[sb.key].Add(sb.app.truth.load())
		}
	}
	for _, t := range out {
		total = total.Add(t)
	}
	return out, total
}

// Report is the total ground truth in one line.
func (d *DataPlane) Report() string {
	_, t := d.Truth()
	return t.String()
}

// Close stops every app and stand-in and removes every namespace the data
// plane created.
func (d *DataPlane) Close() error {
	d.mu.Lock()
	pods := make([]*podSandbox, 0, len(d.pods))
	for _, sb := range d.pods {
		pods = append(pods, sb)
	}
	d.pods, d.standins = map[types.UID]*podSandbox{}, map[types.UID]*standinProc{}
	d.closed = true
	d.mu.Unlock()
	d.starting.Wait() // no spawn adds to d.procs after this
	d.mu.Lock()
	procs := make([]*standinProc, 0, len(d.procs))
	for p := range d.procs {
		procs = append(procs, p)
	}
	d.mu.Unlock()
	for _, sb := range pods {
		if sb.app != nil {
			sb.app.cancel()
			sb.app.ln.Close()
		}
		if sb.probe != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			sb.probe.stop(ctx)
			cancel()
		}
	}
	for _, p := range procs {
		p.kill()
	}
	errs := []error{os.RemoveAll(d.cniRoot)}
	for _, ns := range listNetns(d.prefix) {
		if err := delNetns(ns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ServedBy names the ztunnel pods (namespace/name, oldest connection first)
// whose stand-ins listen in the namespace of the app pod uid.
func (d *DataPlane) ServedBy(uid types.UID) []string {
	d.mu.Lock()
	sb := d.pods[uid]
	var procs []*standinProc
	if sb != nil {
		for _, p := range d.standins {
			if p.node == sb.node {
				procs = append(procs, p)
			}
		}
	}
	d.mu.Unlock()
	if sb == nil {
		return nil
	}
	sort.Slice(procs, func(i, j int) bool { return procs[i].connected < procs[j].connected })
	var out []string
	for _, p := range procs {
		if p.command("has", sb.netns) == nil {
			out = append(out, p.pod)
		}
	}
	return out
}
