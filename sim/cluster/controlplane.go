package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

const (
	// podCIDRBase is where node pod CIDRs are carved from: node i < 256 gets
	// 198.18.i.0/24. It is the RFC 2544 benchmarking range, so pod IPs are
	// never confused with a real network; they only exist inside network
	// namespaces a test creates. Nodes from the 257th on (fleet-scale
	// benchmarks, which run no data plane) get /24s of 100.64.0.0/10, the
	// shared address space of RFC 6598: node 256+j gets 100.(64+j/256).(j%256).0/24.
	podCIDRBase = "198.18"
	podCIDRWide = 100
	// serviceCIDR holds the cluster's service IPs (RFC 2544 as well).
	serviceCIDR = "198.19.0.0/16"
	serviceIP   = "198.19.0.1"
	// maxNodes is bounded by the /24 per node: 256 in 198.18.0.0/16, then
	// 16,384 in 100.64.0.0/10.
	maxNodes = 256 + 64*256
)

// controllers are the kube-controller-manager loops the simulated cluster
// runs: the workload controllers nodewise exercises, PDB (disruption), garbage
// collection, namespaces, service accounts, and node lifecycle for NotReady.
var controllers = []string{
	"daemonset-controller", "deployment-controller", "replicaset-controller",
	"statefulset-controller", "disruption-controller", "garbage-collector-controller",
	"namespace-controller", "serviceaccount-controller", "node-lifecycle-controller",
	"taint-eviction-controller", "endpointslice-controller", "job-controller",
	"pod-garbage-collector-controller", "root-ca-certificate-publisher-controller",
	"clusterrole-aggregation-controller",
}

// binaries are the upstream executables, built by `make tools` into bin/.
type binaries struct {
	Etcd, APIServer, ControllerManager, Scheduler, Kubectl string
}

// findBinaries looks in dir, or when dir is empty in $NODEWISE_BIN_DIR, the
// running executable's directory, and bin/ of any parent of the working
// directory, for the first place that has all of them.
func findBinaries(dir string) (binaries, error) {
	var candidates []string
	if dir != "" {
		candidates = []string{dir}
	} else {
		if env := os.Getenv("NODEWISE_BIN_DIR"); env != "" {
			candidates = append(candidates, env)
		}
		if exe, err := os.Executable(); err == nil {
			candidates = append(candidates, filepath.Dir(exe))
		}
		if wd, err := os.Getwd(); err == nil {
			for d := wd; ; d = filepath.Dir(d) {
				candidates = append(candidates, filepath.Join(d, "bin"))
				if filepath.Dir(d) == d {
					break
				}
			}
		}
	}
	for _, c := range candidates {
		b := binaries{
			Etcd:              filepath.Join(c, "etcd"),
			APIServer:         filepath.Join(c, "kube-apiserver"),
			ControllerManager: filepath.Join(c, "kube-controller-manager"),
			Scheduler:         filepath.Join(c, "kube-scheduler"),
			Kubectl:           filepath.Join(c, "kubectl"),
		}
		if allExecutable(b.Etcd, b.APIServer, b.ControllerManager, b.Scheduler) {
			return b, nil
		}
	}
	return binaries{}, fmt.Errorf("etcd, kube-apiserver, kube-controller-manager and kube-scheduler not found in %v: run `make tools` (or set NODEWISE_BIN_DIR)", candidates)
}

func allExecutable(paths ...string) bool {
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// ports are the loopback ports the components listen on.
type ports struct {
	Etcd, EtcdPeer, APIServer, ControllerManager, Scheduler int
	// Injector is the sidecar injector's (Options.InjectorArgv).
	Injector int `json:",omitempty"`
}

// freePorts picks free loopback ports below the kernel's ephemeral range
// (32768 and up by default). A server port inside that range can be taken
// while the server is down by a reconnecting client whose own local port
// happens to equal it (a TCP self-connect), and then the restarted server
// cannot bind.
func freePorts() (ports, error) {
	var ps [6]int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for i := range ps {
		l, port, err := listenFree()
		if err != nil {
			return ports{}, err
		}
		listeners = append(listeners, l)
		ps[i] = port
	}
	return ports{ps[0], ps[1], ps[2], ps[3], ps[4], ps[5]}, nil
}

// handedOut holds every port listenFree returned in this process. A port is
// free only until its server binds it, seconds later for an API server; tests
// that boot clusters side by side (t.Parallel) would otherwise be handed one
// of those ports twice, and an etcd or API server of one cluster would answer
// the other's health check. A process boots few clusters, so ports are never
// given back.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// listenFree listens on a free loopback port below the ephemeral range (see
// freePorts) that this process has not handed out before; the caller closes
// the listener before its server binds the port.
func listenFree() (net.Listener, int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	for attempt := 0; attempt < 200; attempt++ {
		port := 20000 + mathrand.IntN(12768)
		if handedOut.ports[port] {
			continue
		}
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			handedOut.ports[port] = true
			return l, port, nil
		}
	}
	return nil, 0, fmt.Errorf("no free loopback port found in 20000-32767")
}

func (s *state) etcdArgv(b binaries) []string {
	client := fmt.Sprintf("http://127.0.0.1:%d", s.Ports.Etcd)
	peer := fmt.Sprintf("http://127.0.0.1:%d", s.Ports.EtcdPeer)
	return []string{b.Etcd,
		"--name=sim", "--data-dir=" + filepath.Join(s.Dir, "etcd"),
		"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=sim=" + peer,
		// A test cluster trades durability for speed: a crash of the whole
		// machine loses the cluster anyway.
		"--unsafe-no-fsync=true", "--quota-backend-bytes=4294967296",
		"--log-level=warn",
	}
}

// auditPolicy logs every write request at Metadata level, and nothing else.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
- level: None
`

func (s *state) auditLogPath() string    { return filepath.Join(s.Dir, "logs", "audit.log") }
func (s *state) auditPolicyPath() string { return filepath.Join(s.Dir, "audit-policy.yaml") }

func (s *state) apiserverArgv(b binaries) []string {
	pk := pki{dir: filepath.Join(s.Dir, "pki")}
	var audit []string
	if s.Options.AuditLog {
		audit = []string{"--audit-log-path=" + s.auditLogPath(), "--audit-policy-file=" + s.auditPolicyPath(), "--audit-log-format=json"}
	}
	return append([]string{b.APIServer,
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", s.Ports.Etcd),
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(s.Ports.APIServer),
		"--tls-cert-file=" + pk.path("serving.crt"), "--tls-private-key-file=" + pk.path("serving.key"),
		"--client-ca-file=" + pk.path("ca.crt"),
		"--token-auth-file=" + pk.path("tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + pk.path("sa.pub"),
		"--service-account-signing-key-file=" + pk.path("sa.key"),
		"--service-cluster-ip-range=" + serviceCIDR,
		"--allow-privileged=true",
		// The kubernetes Service gets no endpoints: its only address would be
		// loopback, which the endpoint reconciler refuses, and nothing in the
		// simulated cluster reaches the API server from inside a pod.
		"--endpoint-reconciler-type=none",
		// Webhooks that name a Service are reached through its endpoints, never
		// through a ClusterIP that exists on no network here.
		"--enable-aggregator-routing=true",
		// SO_REUSEADDR, so a restarted API server can bind its port while the
		// killed one's connections linger in TIME_WAIT.
		"--permit-address-sharing=true",
		// The real node's kubelet (logs, exec) is reached at its InternalIP:
		// its hostname resolves nowhere.
		"--kubelet-preferred-address-types=InternalIP,Hostname",
		"--profiling=false", "--v=1",
	}, audit...)
}

func (s *state) controllerManagerArgv(b binaries) []string {
	pk := pki{dir: filepath.Join(s.Dir, "pki")}
	kc := filepath.Join(s.Dir, "controller-manager.kubeconfig")
	return flatten([]string{b.ControllerManager}, kubeconfigFlags(kc), servingFlags(s.Ports.ControllerManager), []string{
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + pk.path("sa.key"),
		"--root-ca-file=" + pk.path("ca.crt"),
		"--controllers=" + strings.Join(controllers, ","),
		"--concurrent-daemonset-syncs=5",
		"--profiling=false", "--v=1",
	}, s.qpsFlags(), lifecycleFlags(s.Options.Heartbeat))
}

// lifecycleFlags scale the node-lifecycle controller's periods with a Lease
// renewal period longer than a kubelet's 10 s, keeping the upstream ratios
// to it (grace 50 s, startup grace 60 s, monitor period 5 s), so a node
// whose renewals are paced over minutes is never taken for dead.
func lifecycleFlags(heartbeat time.Duration) []string {
	if heartbeat <= kubeletHeartbeat {
		return nil
	}
	scaled := func(d time.Duration) string {
		return time.Duration(float64(d) * heartbeat.Seconds() / kubeletHeartbeat.Seconds()).Round(time.Second).String()
	}
	return []string{
		"--node-monitor-grace-period=" + scaled(50*time.Second),
		"--node-startup-grace-period=" + scaled(60*time.Second),
		"--node-monitor-period=" + scaled(5*time.Second),
	}
}

// qpsFlags raise a control-plane component's client rate limits when
// Options.ControllerQPS asks.
func (s *state) qpsFlags() []string {
	q := s.Options.ControllerQPS
	if q == 0 {
		return nil
	}
	return []string{"--kube-api-qps=" + strconv.Itoa(q), "--kube-api-burst=" + strconv.Itoa(2*q)}
}

func (s *state) schedulerArgv(b binaries) []string {
	kc := filepath.Join(s.Dir, "scheduler.kubeconfig")
	return flatten([]string{b.Scheduler}, kubeconfigFlags(kc), servingFlags(s.Ports.Scheduler),
		[]string{"--profiling=false", "--v=1"}, s.qpsFlags())
}

// kubeconfigFlags point a component's client, authentication and
// authorization at one kubeconfig.
func kubeconfigFlags(kc string) []string {
	return []string{"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc}
}

// servingFlags serve a single (non-leader-electing) component's health on loopback.
func servingFlags(port int) []string {
	return []string{"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(port), "--leader-elect=false"}
}

func flatten(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// writeKubeconfig writes a kubeconfig for user that trusts the cluster CA.
func (s *state) writeKubeconfig(path, user string, pk pki) error {
	return s.writeTokenKubeconfig(path, user, pk.tokens[user])
}

// writeTokenKubeconfig writes a kubeconfig that trusts the cluster CA and
// authenticates user with a bearer token.
func (s *state) writeTokenKubeconfig(path, user, token string) error {
	ca, err := os.ReadFile(filepath.Join(s.Dir, "pki", "ca.crt"))
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["nodewise-sim"] = &clientcmdapi.Cluster{Server: s.serverURL(), CertificateAuthorityData: ca}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["nodewise-sim"] = &clientcmdapi.Context{Cluster: "nodewise-sim", AuthInfo: user}
	cfg.CurrentContext = "nodewise-sim"
	return clientcmd.WriteToFile(*cfg, path)
}

func (s *state) serverURL() string { return fmt.Sprintf("https://127.0.0.1:%d", s.Ports.APIServer) }

// restConfig reads one of the cluster's kubeconfigs.
func restConfig(path string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 200, 400 // the sim's clients are trusted; do not throttle tests
	return cfg, nil
}

// waitHealthy polls an HTTPS health endpoint on loopback until it answers 200.
func waitHealthy(ctx context.Context, url, token string, caFile string, proc *process) error {
	tlsCfg := &tls.Config{InsecureSkipVerify: true} // components' self-signed serving certs
	if caFile != "" {
		pool := x509.NewCertPool()
		ca, err := os.ReadFile(caFile)
		if err != nil {
			return err
		}
		pool.AppendCertsFromPEM(ca)
		tlsCfg = &tls.Config{RootCAs: pool}
	}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsCfg}}
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s answered %s", url, resp.Status)
		}
		last = err
		if proc != nil && !proc.alive() {
			return proc.exitedErr()
		}
		select {
		case <-ctx.Done():
			return errors.Join(fmt.Errorf("waiting for %s: %w", url, ctx.Err()), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
