package judgegate

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/health/record"
	"github.com/nodewise/nodewise/health/remote"
)

// AgentConfig says how the orchestrator reaches the node agents.
type AgentConfig struct {
	CAFile string // the PEM bundle that signs the agents' serving certificates
	// RootCAs replaces CAFile with a pool that may change (agentpki.Signer.Pool).
	RootCAs    func() *x509.CertPool
	TokenFile  string // the bearer token the agents accept
	Port       int    // the agents' port on each node's InternalIP (default 9443)
	ServerName string // name to verify in the agents' certificates (default: the IP)
	// VerifyNodeName verifies each agent's certificate names its node
	// (remote.AgentConfig.VerifyNodeName): certificates from agentpki.
	VerifyNodeName bool
	// SampleEvery is how often the recorder samples each node in flight
	// (default 30s, record.RecorderConfig.Every). A baseline needs three
	// samples for its dispersion estimate, so short baselines need a short period.
	SampleEvery time.Duration
}

// Configured reports whether any agent credential was given: then the
// agents are to be used, and a missing half is an error (Agents says which).
func (c AgentConfig) Configured() bool {
	return c.CAFile != "" || c.TokenFile != "" || c.RootCAs != nil
}

// Build assembles the judge over the node agents: an agent client that
// reaches each node's agent on its InternalIP, the recorder that samples
// nodes in flight (run it alongside the orchestrator), and the gate.
//
// gateAddresses are the hosts spec.gates.prometheus may query (the
// orchestrator's --gate-address-allow and --cluster-domain).
func Build(cfg AgentConfig, gateAddresses remote.AddressPolicy, kube kubernetes.Interface, reg prometheus.Registerer, log *zap.Logger) (*Gate, *record.Recorder, error) {
	agents, err := Agents(cfg, kube, log)
	if err != nil {
		return nil, nil, err
	}
	return BuildOn(agents, cfg.SampleEvery, gateAddresses, reg, log)
}

// BuildOn assembles the judge over a source of the agents' snapshots: the
// recorder that samples nodes in flight every every (0: the recorder's
// default; run it alongside the orchestrator) and the gate. Build gives it
// the agent client; a test may give it agents of its own.
func BuildOn(agents health.SnapshotSource, every time.Duration, gateAddresses remote.AddressPolicy, reg prometheus.Registerer, log *zap.Logger) (*Gate, *record.Recorder, error) {
	rec, err := record.NewRecorder(record.RecorderConfig{Source: agents, Every: every, Logger: log.Named("recorder")})
	if err != nil {
		return nil, nil, err
	}
	// The judge reads the current snapshots through the recorder: on the
	// orchestrator's clock, as the windows are.
	judge, err := health.NewJudge(health.JudgeConfig{Source: rec, Logger: log.Named("judge"), Registry: reg})
	if err != nil {
		return nil, nil, err
	}
	gate, err := New(Config{Judge: judge, Recorder: rec, GateAddresses: gateAddresses, Logger: log.Named("gate")})
	if err != nil {
		return nil, nil, err
	}
	return gate, rec, nil
}

// Agents is the client that reads each node's agent on its InternalIP, as
// the judge does. The orchestrator also uses it for drain policy auto
// (orchestrator.Config.Agents).
func Agents(cfg AgentConfig, kube kubernetes.Interface, log *zap.Logger) (*remote.Agent, error) {
	if (cfg.CAFile == "" && cfg.RootCAs == nil) || cfg.TokenFile == "" {
		return nil, fmt.Errorf("the node agents need both their CA (--agent-ca or --agent-issuer) and a token file (--agent-token-file)")
	}
	if cfg.Port == 0 {
		cfg.Port = 9443
	}
	urls := &agentURLs{kube: kube, port: cfg.Port, ttl: addressTTL, now: time.Now, known: map[string]knownURL{}}
	return remote.NewAgent(remote.AgentConfig{
		CAFile: cfg.CAFile, RootCAs: cfg.RootCAs, TokenFile: cfg.TokenFile, ServerName: cfg.ServerName, VerifyNodeName: cfg.VerifyNodeName, Logger: log.Named("agents"),
		URLFor: urls.of,
	})
}

// addressTTL is how long a node's agent address is used before the Node is
// read again.
const addressTTL = 5 * time.Minute

// agentURLs finds each node's agent at https://<InternalIP>:<port> (the
// agent runs on the host network). An address read from the API is kept for
// the ttl, so sampling the nodes in flight and their controls every few
// seconds does not GET each Node every time: one GET per node per ttl. A
// failed read is not kept.
type agentURLs struct {
	kube kubernetes.Interface
	port int
	ttl  time.Duration
	now  func() time.Time

	mu    sync.Mutex
	known map[string]knownURL
}

type knownURL struct {
	url  string
	read time.Time
}

func (u *agentURLs) of(ctx context.Context, node string) (string, error) {
	u.mu.Lock()
	k, ok := u.known[node]
	u.mu.Unlock()
	if ok && u.now().Sub(k.read) < u.ttl {
		return k.url, nil
	}
	n, err := u.kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("finding the agent of node %s: %w", node, err)
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			url := "https://" + net.JoinHostPort(a.Address, strconv.Itoa(u.port))
			u.mu.Lock()
			u.known[node] = knownURL{url: url, read: u.now()}
			u.mu.Unlock()
			return url, nil
		}
	}
	return "", fmt.Errorf("node %s has no InternalIP to reach its agent on", node)
}
