package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Options describe a simulated cluster.
type Options struct {
	// Nodes is the number of simulated nodes, 1 to maxNodes (16,640). Required.
	Nodes int `json:"nodes"`
	// Zones spreads the nodes round-robin over this many zones (zone-a, zone-b, …).
	// Zero means one zone.
	Zones int `json:"zones"`
	// ReadyDelay is how long a bound pod takes to become Running and Ready.
	// Zero means 500 ms.
	ReadyDelay time.Duration `json:"readyDelay"`
	// Heartbeat is how often each node's Lease is renewed. Zero means
	// FleetHeartbeat(Nodes): 10 s, as a kubelet does, up to 200 nodes, and
	// longer for larger fleets, so that all their renewals together cost the
	// API server HeartbeatsPerSecond. kube-controller-manager's node-lifecycle
	// periods are scaled with it (lifecycleFlags), so no node goes NotReady.
	Heartbeat time.Duration `json:"heartbeat"`
	// ControllerQPS, when set, is the kube-api-qps of kube-controller-manager
	// and kube-scheduler (burst twice that), as large clusters configure them;
	// zero keeps the upstream defaults (20 and 50).
	ControllerQPS int `json:"controllerQPS,omitempty"`
	// BinDir holds etcd and the Kubernetes binaries; empty means search (see findBinaries).
	BinDir string `json:"binDir,omitempty"`
	// KubeletArgv, when set, runs the simulated kubelet as this background
	// process (the CLI re-executes itself); when empty the kubelet runs inside
	// the calling process, with Runtime as its container runtime.
	KubeletArgv []string `json:"kubeletArgv,omitempty"`
	// InjectorArgv, with KubeletArgv, runs a sidecar injector for every
	// installed revision as this background process (see RunInjector), so
	// InstallIstio's webhooks inject real proxies (Cluster.Injector).
	InjectorArgv []string `json:"injectorArgv,omitempty"`
	// AuditLog makes the API server write an audit log of every write
	// request (create, update, patch, delete; Metadata level: who, with
	// which User-Agent, on what, and the answer's code) to Cluster.AuditLog,
	// for tests that prove from the API side which client wrote what.
	AuditLog bool `json:"auditLog,omitempty"`
	// Runtime runs the containers of the in-process kubelet; nil runs none.
	Runtime Runtime `json:"-"`
	// Log receives the in-process kubelet's logs; nil discards them.
	Log *zap.Logger `json:"-"`
}

// Validate checks the options and fills in defaults.
func (o *Options) Validate() error {
	if o.Nodes < 1 || o.Nodes > maxNodes {
		return fmt.Errorf("nodes must be between 1 and %d, got %d", maxNodes, o.Nodes)
	}
	if o.Zones == 0 {
		o.Zones = 1
	}
	if o.Zones < 1 || o.Zones > o.Nodes || o.Zones > 26 {
		return fmt.Errorf("zones must be between 1 and min(nodes, 26), got %d for %d nodes", o.Zones, o.Nodes)
	}
	if o.ReadyDelay < 0 || o.Heartbeat < 0 || o.ControllerQPS < 0 {
		return fmt.Errorf("ready delay, heartbeat and controller QPS must not be negative")
	}
	if o.ReadyDelay == 0 {
		o.ReadyDelay = 500 * time.Millisecond
	}
	if o.Heartbeat == 0 {
		o.Heartbeat = FleetHeartbeat(o.Nodes)
	}
	return nil
}

// kubeletHeartbeat is a kubelet's Lease renewal period (a quarter of its
// 40 s Lease), the period kube-controller-manager's node-lifecycle defaults
// are made for.
const kubeletHeartbeat = 10 * time.Second

// HeartbeatsPerSecond is what a simulated fleet's Lease renewals cost the
// API server at most, whatever its size, by default. At a kubelet's 10 s,
// 5,000 nodes would renew 500 times a second, more than this machine's API
// server serves (docs/orchestrator.md, "Fleet scale"): a benchmark would
// measure the simulated kubelets, not what they host. nodewise never reads a
// node's Lease, only its Ready condition, which stays True.
const HeartbeatsPerSecond = 20

// FleetHeartbeat is the default Lease renewal period of a fleet of n nodes:
// a kubelet's 10 s, or n / HeartbeatsPerSecond seconds when that is longer
// (50 s at 1,000 nodes, 250 s at 5,000).
func FleetHeartbeat(n int) time.Duration {
	return max(kubeletHeartbeat, time.Duration(n)*time.Second/HeartbeatsPerSecond)
}

// state is what the state directory records, in cluster.json, so that a later
// command (status, down) or a test can find every process the cluster started.
type state struct {
	Dir       string     `json:"dir"`
	Options   Options    `json:"options"`
	Nodes     []NodeSpec `json:"nodes"`
	Ports     ports      `json:"ports"`
	Processes []*process `json:"processes"`
	Created   time.Time  `json:"created"`
}

const stateFile = "cluster.json"

func (s *state) save() error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(s.Dir, stateFile+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(s.Dir, stateFile)) // atomic: never half-written
}

func loadState(dir string) (*state, error) {
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no simulated cluster in %s (%s is missing)", dir, stateFile)
	}
	if err != nil {
		return nil, err
	}
	var s state
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("state dir %s is corrupt (%s: %v); stop its processes by hand if any remain", dir, stateFile, err)
	}
	if len(s.Processes) == 0 || s.Ports.APIServer == 0 {
		return nil, fmt.Errorf("state dir %s is corrupt (%s records no processes)", dir, stateFile)
	}
	s.Dir = dir
	return &s, nil
}

func (s *state) process(name string) *process {
	for _, p := range s.Processes {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Cluster is a running simulated cluster.
type Cluster struct {
	// Dir is the state directory.
	Dir string
	// Kubeconfig is the path of the admin kubeconfig (Dir/kubeconfig).
	Kubeconfig string
	// AuditLog is the API server's audit log (JSON lines) with
	// Options.AuditLog, else empty.
	AuditLog string
	// Config is the admin's client configuration.
	Config *rest.Config
	// Client is an admin client.
	Client kubernetes.Interface
	// Nodes are the simulated nodes.
	Nodes []NodeSpec

	state       *state
	bins        binaries
	stopKubelet context.CancelFunc
	kubeletDone chan struct{}
}

// Up starts a cluster in dir and returns once every component is healthy and
// every node is Ready. On any error it stops what it started and removes dir.
func Up(ctx context.Context, dir string, opts Options) (*Cluster, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := CheckStateDir(dir); err != nil {
		return nil, err
	}
	bins, err := findBinaries(opts.BinDir)
	if err != nil {
		return nil, err
	}
	for _, sub := range []string{"logs", "pids"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			return nil, err
		}
	}
	s := &state{Dir: dir, Options: opts, Nodes: nodeSpecs(opts.Nodes, opts.Zones), Created: time.Now()}
	c := &Cluster{Dir: dir, Kubeconfig: filepath.Join(dir, "kubeconfig"), Nodes: s.Nodes, state: s, bins: bins}
	if opts.AuditLog {
		c.AuditLog = s.auditLogPath()
		if err := os.WriteFile(s.auditPolicyPath(), []byte(auditPolicy), 0o644); err != nil {
			return nil, err
		}
	}
	if err := c.boot(ctx); err != nil {
		c.Stop()
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}

// CheckStateDir returns an error unless dir is free for a new cluster: absent
// or empty.
func CheckStateDir(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, stateFile)); err == nil {
		return fmt.Errorf("state dir %s is already in use by a simulated cluster (run `nodewise sim down --state-dir %s` first)", dir, dir)
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("state dir %s is not empty; choose a new or empty directory", dir)
	}
	return nil
}

func (c *Cluster) boot(ctx context.Context) error {
	s := c.state
	pk, err := newPKI(filepath.Join(s.Dir, "pki"))
	if err != nil {
		return err
	}
	if s.Ports, err = freePorts(); err != nil {
		return err
	}
	if err := s.save(); err != nil {
		return err
	}
	if err := c.startComponent("etcd", s.etcdArgv(c.bins)); err != nil {
		return err
	}
	if err := waitHealthy(ctx, fmt.Sprintf("http://127.0.0.1:%d/health", s.Ports.Etcd), "", "", s.process("etcd")); err != nil {
		return err
	}
	for path, user := range map[string]string{
		c.Kubeconfig: userAdmin,
		filepath.Join(s.Dir, "controller-manager.kubeconfig"): userController,
		filepath.Join(s.Dir, "scheduler.kubeconfig"):          userScheduler,
		filepath.Join(s.Dir, "kubelet.kubeconfig"):            userKubelet,
	} {
		if err := s.writeKubeconfig(path, user, pk); err != nil {
			return err
		}
	}
	if err := c.startAPIServer(ctx); err != nil {
		return err
	}
	if c.Config, err = restConfig(c.Kubeconfig); err != nil {
		return err
	}
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return err
	}
	if err := grantKubelet(ctx, c.Client); err != nil {
		return err
	}
	if err := c.startComponent("kube-controller-manager", s.controllerManagerArgv(c.bins)); err != nil {
		return err
	}
	if err := c.startComponent("kube-scheduler", s.schedulerArgv(c.bins)); err != nil {
		return err
	}
	for name, port := range map[string]int{"kube-controller-manager": s.Ports.ControllerManager, "kube-scheduler": s.Ports.Scheduler} {
		if err := waitHealthy(ctx, fmt.Sprintf("https://127.0.0.1:%d/healthz", port), "", "", s.process(name)); err != nil {
			return err
		}
	}
	if err := c.startKubelet(ctx); err != nil {
		return err
	}
	if err := c.startInjector(ctx); err != nil {
		return err
	}
	return c.waitReady(ctx)
}

// startComponent starts one process and records it before anything waits on
// it, so a crash during start-up still leaves `down` able to stop it.
func (c *Cluster) startComponent(name string, argv []string) error {
	_, err := c.startComponentEnv(name, argv, nil)
	return err
}

// startComponentEnv is startComponent with env added to the environment; it
// returns the process as recorded.
func (c *Cluster) startComponentEnv(name string, argv, env []string) (*process, error) {
	p, err := startProcessEnv(name, argv, filepath.Join(c.state.Dir, "logs", name+".log"), c.detached(), env)
	if err != nil {
		return nil, err
	}
	if old := c.state.process(name); old != nil {
		*old = *p
		p = old
	} else {
		c.state.Processes = append(c.state.Processes, p)
	}
	if err := writePIDFile(c.state.Dir, p); err != nil {
		return p, err
	}
	return p, c.state.save()
}

func (c *Cluster) detached() bool { return len(c.state.Options.KubeletArgv) > 0 }

func (c *Cluster) startAPIServer(ctx context.Context) error {
	s := c.state
	if err := c.startComponent("kube-apiserver", s.apiserverArgv(c.bins)); err != nil {
		return err
	}
	pk, err := loadPKI(filepath.Join(s.Dir, "pki"))
	if err != nil {
		return err
	}
	return waitHealthy(ctx, s.serverURL()+"/readyz", pk.tokens[userAdmin], pk.path("ca.crt"), s.process("kube-apiserver"))
}

// startKubelet runs the simulated kubelet in this process, or as a background
// process when Options.KubeletArgv says how.
func (c *Cluster) startKubelet(ctx context.Context) error {
	if c.detached() {
		return c.startComponent("sim-kubelet", c.state.Options.KubeletArgv)
	}
	k, err := kubeletFor(c.state, c.state.Options.Runtime, c.state.Options.Log)
	if err != nil {
		return err
	}
	kctx, cancel := context.WithCancel(context.Background())
	c.stopKubelet, c.kubeletDone = cancel, make(chan struct{})
	errs := make(chan error, 1)
	go func() {
		defer close(c.kubeletDone)
		errs <- k.Run(kctx)
	}()
	select {
	case err := <-errs:
		return fmt.Errorf("simulated kubelet: %w", err)
	case <-time.After(100 * time.Millisecond):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// kubeletFor builds the simulated kubelet of a cluster's state directory.
func kubeletFor(s *state, rt Runtime, log *zap.Logger) (*Kubelet, error) {
	cfg, err := restConfig(filepath.Join(s.Dir, "kubelet.kubeconfig"))
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return NewKubelet(client, KubeletConfig{
		Nodes: s.Nodes, ReadyDelay: s.Options.ReadyDelay, Heartbeat: s.Options.Heartbeat, Runtime: rt, Log: log,
	})
}

// RunKubelet runs the simulated kubelet of the cluster in dir until ctx ends.
// `nodewise sim up` starts it as a background process.
func RunKubelet(ctx context.Context, dir string, log *zap.Logger) error {
	s, err := loadState(dir)
	if err != nil {
		return err
	}
	k, err := kubeletFor(s, nil, log)
	if err != nil {
		return err
	}
	return k.Run(ctx)
}

// waitReady waits for every node to be Ready and for the controller manager
// to have created the default service account (its controllers are running):
// 2 minutes, and 50 ms more per node (thousands of nodes register and renew
// their first leases through one API server).
func (c *Cluster) waitReady(ctx context.Context) error {
	limit := 2*time.Minute + time.Duration(len(c.state.Nodes))*50*time.Millisecond
	// Each look lists every node: at thousands of nodes, every 250 ms would
	// be much of what the API server does.
	every := max(250*time.Millisecond, time.Duration(len(c.state.Nodes))*time.Millisecond)
	return wait.PollUntilContextTimeout(ctx, every, limit, true, func(ctx context.Context) (bool, error) {
		for _, p := range c.state.Processes {
			if !p.alive() {
				return false, p.exitedErr()
			}
		}
		nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		if readyNodes(nodes.Items) < len(c.state.Nodes) {
			return false, nil
		}
		_, err = c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
}

func readyNodes(nodes []corev1.Node) int {
	n := 0
	for _, node := range nodes {
		for _, cond := range node.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				n++
			}
		}
	}
	return n
}

// grantKubelet gives the simulated kubelet what a kubelet may do: manage its
// nodes and their leases, and report and remove the pods bound to them.
func grantKubelet(ctx context.Context, client kubernetes.Interface) error {
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "nodewise:sim-kubelet"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "create", "patch", "update"}},
			{APIGroups: []string{""}, Resources: []string{"nodes/status", "pods/status"}, Verbs: []string{"patch", "update"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "delete"}},
			{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "nodewise:sim-kubelet"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: userKubelet}},
	}
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("granting the simulated kubelet its role: %w", err)
	}
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("binding the simulated kubelet's role: %w", err)
	}
	return nil
}

// Attach connects to the cluster a previous Up left running in dir.
func Attach(dir string) (*Cluster, error) {
	s, err := loadState(dir)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: s.Dir, Kubeconfig: filepath.Join(s.Dir, "kubeconfig"), Nodes: s.Nodes, state: s}
	if s.Options.AuditLog {
		c.AuditLog = s.auditLogPath()
	}
	if c.Config, err = restConfig(c.Kubeconfig); err != nil {
		return nil, err
	}
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return nil, err
	}
	return c, nil
}

// Stop stops every process the cluster started, newest first, and the
// in-process kubelet. It never signals a process it did not start.
func (c *Cluster) Stop() {
	if c.stopKubelet != nil {
		c.stopKubelet()
		<-c.kubeletDone
		c.stopKubelet = nil
	}
	for i := len(c.state.Processes) - 1; i >= 0; i-- {
		c.state.Processes[i].stop(10 * time.Second)
	}
}

// Down stops the cluster a previous Up left running in dir and removes dir.
func Down(dir string) error {
	s, err := loadState(dir)
	if err != nil {
		return err
	}
	(&Cluster{state: s}).Stop()
	for _, p := range s.Processes {
		if p.alive() {
			return fmt.Errorf("%s (pid %d) is still running after SIGKILL; state dir %s kept", p.Name, p.PID, dir)
		}
	}
	return os.RemoveAll(s.Dir)
}

// RestartAPIServer kills the kube-apiserver with SIGKILL and starts it again
// on the same port with the same flags, waiting until it is ready.
func (c *Cluster) RestartAPIServer(ctx context.Context) error {
	p := c.state.process("kube-apiserver")
	if err := p.signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing kube-apiserver: %w", err)
	}
	if !p.waitExited(10 * time.Second) {
		return fmt.Errorf("kube-apiserver (pid %d) did not exit after SIGKILL", p.PID)
	}
	if c.bins.APIServer == "" {
		return fmt.Errorf("restarting kube-apiserver: binaries unknown in an attached cluster")
	}
	return c.startAPIServer(ctx)
}

// Processes lists the components the cluster started, with their PIDs.
func (c *Cluster) Processes() []process {
	out := make([]process, 0, len(c.state.Processes))
	for _, p := range c.state.Processes {
		out = append(out, *p)
	}
	return out
}
