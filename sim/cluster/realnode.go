package cluster

import (
	"archive/tar"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RealNode is a real kubelet (built from k8s.io/kubernetes by `make
// tool-kubelet`) joined to the cluster beside the simulated nodes: its pods
// run as containers under a containerd of its own (runc, cgroupfs), with
// pod networking from Debian's CNI plugins (bridge, host-local, loopback).
// It registers with the taint TaintRealNode, so only pods that tolerate it
// land there.
type RealNode struct {
	Name       string
	Containerd *Containerd
	// PodCIDR is the host-local range its pods get their IPs from.
	PodCIDR string

	// CNIConfDir and CNIBinDir are the node's CNI dirs (its /etc/cni/net.d
	// and /opt/cni/bin): the conflist of the bridge CNI, and the plugins,
	// Debian's linked in, where an installer such as istio-cni's adds its own.
	CNIConfDir, CNIBinDir string

	// IP is the node's InternalIP: the bridge's gateway address, so that
	// its pods reach a hostNetwork pod (the agent) at the node's IP.
	IP string

	dir    string
	bridge string
	nat    [][]string // the iptables rules that route the kubernetes Service
	proc   *process
}

// TaintRealNode keeps the simulated cluster's own pods off a real node.
const TaintRealNode = "sim.nodewise.io/real-node"

// RealNodeOptions configure StartRealNode.
type RealNodeOptions struct {
	// Name of the node. Required.
	Name string
	// BinDir holds kubelet and images/pause.tar (make tool-kubelet, make images).
	BinDir string
	// PodCIDR is the /24 its pods are addressed from; empty means 10.244.250.0/24.
	PodCIDR string
	// RegistryMirrors are its containerd's hosts.toml mirrors
	// (ContainerdOptions.RegistryMirrors): the kubelet pulls a pod's image
	// from a registry on loopback under the image's own name.
	RegistryMirrors map[string]string
}

// StartRealNode starts containerd and a kubelet in dir, registered as
// opts.Name with c's admin credentials, and waits until the node is Ready.
func (c *Cluster) StartRealNode(ctx context.Context, dir string, opts RealNodeOptions) (*RealNode, error) {
	if opts.Name == "" {
		return nil, fmt.Errorf("real node: a Name is required")
	}
	if opts.PodCIDR == "" {
		opts.PodCIDR = "10.244.250.0/24"
	}
	kubelet := filepath.Join(opts.BinDir, "kubelet")
	if _, err := os.Stat(kubelet); err != nil {
		return nil, fmt.Errorf("no kubelet (make tool-kubelet builds it): %w", err)
	}
	pauseTar := filepath.Join(opts.BinDir, "images", "pause.tar")
	pause, _, err := archiveImage(pauseTar)
	if err != nil {
		return nil, fmt.Errorf("the sandbox image (make images builds it): %w", err)
	}
	n := &RealNode{Name: opts.Name, PodCIDR: opts.PodCIDR, dir: dir, bridge: "nwreal" + fmt.Sprint(os.Getpid()%10000)}
	n.CNIBinDir = filepath.Join(dir, "cni-bin")
	if err := linkCNIPlugins(n.CNIBinDir); err != nil {
		return nil, err
	}
	n.Containerd, err = StartContainerd(ctx, filepath.Join(dir, "containerd"), ContainerdOptions{CRI: true, SandboxImage: pause, RegistryMirrors: opts.RegistryMirrors, CNIBinDir: n.CNIBinDir})
	if err != nil {
		return nil, err
	}
	n.CNIConfDir = filepath.Join(n.Containerd.Dir, "cni")
	if _, err := n.Containerd.Import(ctx, pauseTar); err != nil {
		n.Stop()
		return nil, err
	}
	if err := n.plumb(c.state.Ports.APIServer); err != nil {
		n.Stop()
		return nil, err
	}
	cni := fmt.Sprintf(`{"cniVersion":"0.4.0","name":"nodewise","plugins":[`+
		`{"type":"bridge","bridge":%q,"isGateway":true,"ipMasq":false,"ipam":{"type":"host-local","ranges":[[{"subnet":%q}]],"routes":[{"dst":"0.0.0.0/0"}]}},`+
		`{"type":"loopback"}]}`, n.bridge, opts.PodCIDR)
	if err := os.WriteFile(filepath.Join(n.CNIConfDir, "10-nodewise.conflist"), []byte(cni), 0o644); err != nil {
		n.Stop()
		return nil, err
	}
	// The node agent mounts the host's CNI dirs (type Directory: it creates
	// nothing on a node), which a node with a CNI has; this node's own CNI
	// config lives under the containerd dir, so the standard dirs are made here.
	for _, d := range []string{"/etc/cni/net.d", "/opt/cni/bin"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			n.Stop()
			return nil, fmt.Errorf("the host's CNI dir %s, which the node agent mounts: %w", d, err)
		}
	}
	// The API server reaches the kubelet (logs, exec) at the node's IP.
	l, port, err := listenFree()
	if err != nil {
		n.Stop()
		return nil, err
	}
	l.Close()
	// This machine kind has cgroup v1 and no systemd: the cgroupfs driver, and
	// failCgroupV1 false (a 1.35+ kubelet refuses v1 otherwise). No eviction
	// or image GC thresholds: the disk is shared with everything else.
	config := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%s
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
address: %s
port: %d
readOnlyPort: 0
healthzPort: 0
enforceNodeAllocatable: []
resolvConf: ""
podLogsDir: %s
evictionHard: {}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
registerWithTaints:
  - {key: %s, effect: NoSchedule}
`, n.Containerd.Socket, n.IP, port, filepath.Join(dir, "kubelet", "logs"), TaintRealNode)
	kdir := filepath.Join(dir, "kubelet")
	if err := os.MkdirAll(kdir, 0o755); err != nil {
		n.Stop()
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(kdir, "config.yaml"), []byte(config), 0o644); err != nil {
		n.Stop()
		return nil, err
	}
	argv := []string{kubelet, "--config", filepath.Join(kdir, "config.yaml"), "--kubeconfig", c.Kubeconfig,
		"--hostname-override", opts.Name, "--node-ip", n.IP, "--root-dir", filepath.Join(kdir, "root"), "--cert-dir", filepath.Join(kdir, "pki")}
	n.proc, err = startProcess("kubelet-"+opts.Name, argv, filepath.Join(kdir, "kubelet.log"), false)
	if err != nil {
		n.Stop()
		return nil, err
	}
	for !c.nodeReady(ctx, opts.Name) {
		if !n.proc.alive() {
			err := n.proc.exitedErr()
			n.Stop()
			return nil, fmt.Errorf("the kubelet cannot run here: %w", err)
		}
		select {
		case <-ctx.Done():
			n.Stop()
			return nil, fmt.Errorf("node %s not Ready: %w; last lines of the kubelet log:\n%s", opts.Name, ctx.Err(), tail(filepath.Join(kdir, "kubelet.log"), 5))
		case <-time.After(200 * time.Millisecond):
		}
	}
	return n, nil
}

// KubeletLog is the path of the kubelet's log.
func (n *RealNode) KubeletLog() string { return filepath.Join(n.dir, "kubelet", "kubelet.log") }

// ContainerLog is what the container wrote (the CRI log file, with its
// timestamp and stream prefixes) in its current run: the API server's
// GetLogs would need the kubelet to serve it with credentials it has not.
func (n *RealNode) ContainerLog(pod *corev1.Pod, container string) (string, error) {
	name := filepath.Join(n.dir, "kubelet", "logs", pod.Namespace+"_"+pod.Name+"_"+string(pod.UID), container)
	files, _ := filepath.Glob(filepath.Join(name, "*.log"))
	if len(files) == 0 {
		return "", fmt.Errorf("no log of %s/%s's %s under %s", pod.Namespace, pod.Name, container, name)
	}
	sort.Strings(files)
	b, err := os.ReadFile(files[len(files)-1])
	return string(b), err
}

// Stop stops the kubelet, kills the containers it left, stops containerd
// and removes what they left on the host: mounts under the node's directory
// and the CNI bridge.
func (n *RealNode) Stop() {
	if n.proc != nil {
		n.proc.stop(10 * time.Second)
	}
	if n.Containerd != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var netns []string
		if out, err := n.Containerd.ctr(ctx, "tasks", "ls"); err == nil {
			var ids, pids []string
			for _, line := range strings.Split(out, "\n")[1:] { // TASK PID STATUS
				if f := strings.Fields(line); len(f) > 1 {
					ids, pids = append(ids, f[0]), append(pids, f[1])
				}
			}
			netns = podNetns(pids)
			for _, id := range ids {
				_, _ = n.Containerd.ctr(ctx, "tasks", "kill", "-s", "SIGKILL", id)
			}
		}
		time.Sleep(500 * time.Millisecond) // the shims exit with their tasks
		n.Containerd.Stop()
		for _, p := range netns {
			_ = syscall.Unmount(p, syscall.MNT_DETACH)
			_ = os.Remove(p)
		}
	}
	unmountUnder(n.dir)
	for _, rule := range n.nat {
		_ = exec.Command("iptables", append([]string{"-t", "nat", "-D"}, rule...)...).Run()
	}
	_ = exec.Command("ip", "link", "del", n.bridge).Run()
}

// plumb gives the node what a real one has from its network and kube-proxy:
// a non-loopback address (the CNI bridge, up before the first pod, with the
// gateway address of PodCIDR) and the kubernetes Service's ClusterIP
// routed to the API server, which listens on loopback only. Both the pods on
// the bridge (PREROUTING; route_localnet lets their packets go to 127.0.0.1)
// and the hostNetwork pods (OUTPUT) reach it, with in-cluster credentials.
func (n *RealNode) plumb(apiPort int) error {
	ip, cidr, err := net.ParseCIDR(n.PodCIDR)
	if err != nil {
		return fmt.Errorf("real node: pod CIDR %q: %w", n.PodCIDR, err)
	}
	gw := ip.Mask(cidr.Mask).To4()
	gw[3]++
	n.IP = gw.String()
	ones, _ := cidr.Mask.Size()
	for _, argv := range [][]string{
		{"ip", "link", "add", "name", n.bridge, "type", "bridge"},
		{"ip", "addr", "add", fmt.Sprintf("%s/%d", n.IP, ones), "dev", n.bridge},
		{"ip", "link", "set", n.bridge, "up"},
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("real node: %s: %v: %s", strings.Join(argv, " "), err, out)
		}
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+n.bridge+"/route_localnet", []byte("1"), 0o644); err != nil {
		return fmt.Errorf("real node: %w", err)
	}
	to := fmt.Sprintf("127.0.0.1:%d", apiPort)
	for _, rule := range [][]string{
		{"PREROUTING", "-i", n.bridge, "-d", serviceIP, "-p", "tcp", "--dport", "443", "-j", "DNAT", "--to-destination", to},
		{"OUTPUT", "-d", serviceIP, "-p", "tcp", "--dport", "443", "-j", "DNAT", "--to-destination", to},
	} {
		// First in its chain: a rule left by a node killed before its Stop
		// (its API server gone) must not answer for this one.
		if out, err := exec.Command("iptables", append([]string{"-t", "nat", "-I"}, rule...)...).CombinedOutput(); err != nil {
			return fmt.Errorf("real node: iptables -t nat -I %s: %v: %s", strings.Join(rule, " "), err, out)
		}
		n.nat = append(n.nat, rule)
	}
	return nil
}

// linkCNIPlugins makes dir the node's CNI bin dir, with Debian's bridge,
// host-local and loopback linked in.
func linkCNIPlugins(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if err := os.Symlink(filepath.Join(cniBinDir, p), filepath.Join(dir, p)); err != nil {
			return fmt.Errorf("real node: the CNI plugin %s: %w", p, err)
		}
	}
	return nil
}

// podNetns are the entries of containerd's netns dir (/run/netns, where
// its CRI pins each pod sandbox's network namespace as cni-<uuid>) that
// are the network namespaces of the processes pids: the node's pods', which
// outlive a kill of their tasks, since the kubelet stops none of them.
func podNetns(pids []string) []string {
	inode := func(path string) uint64 {
		var st syscall.Stat_t
		if syscall.Stat(path, &st) != nil {
			return 0
		}
		return st.Ino
	}
	ours := map[uint64]bool{}
	for _, pid := range pids {
		if ino := inode("/proc/" + pid + "/ns/net"); ino != 0 {
			ours[ino] = true
		}
	}
	entries, _ := os.ReadDir("/run/netns")
	var paths []string
	for _, e := range entries {
		p := filepath.Join("/run/netns", e.Name())
		if strings.HasPrefix(e.Name(), "cni-") && ours[inode(p)] {
			paths = append(paths, p)
		}
	}
	return paths
}

// unmountUnder detaches every mount below dir (rootfs overlays, netns and
// shm mounts), deepest first, so the directory can be removed.
func unmountUnder(dir string) {
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], dir+"/") {
			points = append(points, f[1])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	for _, p := range points {
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
	}
}

// archiveImage is the image an OCI archive's index records: its name
// (org.opencontainers.image.ref.name, as buildah and docker buildx write it)
// and its manifest's digest, the digest a registry serves it under once
// pushed unchanged (containerd imports and pushes the manifest as it is).
func archiveImage(path string) (ref, digest string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return "", "", fmt.Errorf("%s has no index.json: not an OCI archive", path)
		}
		if err != nil {
			return "", "", fmt.Errorf("reading %s: %w", path, err)
		}
		if filepath.Clean(h.Name) != "index.json" {
			continue
		}
		var index struct {
			Manifests []struct {
				Digest      string            `json:"digest"`
				Annotations map[string]string `json:"annotations"`
			} `json:"manifests"`
		}
		if err := json.NewDecoder(tr).Decode(&index); err != nil {
			return "", "", fmt.Errorf("reading %s's index.json: %w", path, err)
		}
		for _, m := range index.Manifests {
			if ref := m.Annotations["org.opencontainers.image.ref.name"]; ref != "" {
				return ref, m.Digest, nil
			}
		}
		return "", "", fmt.Errorf("%s's index.json names no image", path)
	}
}

// nodeReady reports whether the node is registered and Ready.
func (c *Cluster) nodeReady(ctx context.Context, name string) bool {
	node, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false
	}
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}
