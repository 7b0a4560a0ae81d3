package nodeagent

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	authnv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
)

// Modes accepted by Config.Mode.
const (
	ModeAuto = "auto" // eBPF, falling back to /proc when the programs cannot load
	ModeEBPF = "ebpf" // eBPF only: a failed load is an error
	ModeProc = "proc" // /proc counters only
)

// History defaults (Config.HistoryEvery, HistoryKeep, HistoryMaxBytes).
const (
	DefaultHistoryEvery    = 30 * time.Second
	DefaultHistoryKeep     = time.Hour
	DefaultHistoryMaxBytes = 16 << 20
)

// Config is everything the agent needs. New validates it and fills defaults.
type Config struct {
	Node       string // node name reported in snapshots; default: the hostname
	Mode       string // ModeAuto (default), ModeEBPF or ModeProc
	ListenAddr string // default ":9443"
	CertFile   string // TLS serving certificate (required unless GetCertificate)
	KeyFile    string // TLS private key (required unless GetCertificate)
	TokenFile  string // bearer token callers must present (required unless Authenticator)
	// GetCertificate, when set, serves the TLS certificate instead of
	// CertFile/KeyFile: a certificate issued to this node and renewed in
	// memory (agentpki.Requester).
	GetCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	// Authenticator, when set, admits callers instead of the static token in
	// TokenFile: a TokenReview of the caller's ServiceAccount token (agentpki.Reviewer).
	Authenticator Authenticator
	ProcRoot      string // default "/proc"
	Version       string // default "dev"
	// Resolver maps namespaces to pods. Default: in eBPF mode a
	// CgroupResolver fed by the programs (then a ProcResolver for what it
	// misses); in proc mode a ProcResolver. Both name pods via PodLister.
	// Namespaces are keyed by their inode in eBPF mode and by KeyProcNet in
	// proc mode, so a Resolver given here must match the mode.
	Resolver Resolver
	// Mesh, when set, makes every snapshot check the enrollment of the
	// node's ambient pods (Snapshot.Enrollment, docs/enrollment.md).
	Mesh MeshSource
	// PodLister names pods by UID for the default resolvers (optional).
	PodLister PodLister
	// CgroupRoot is the cgroup v2 mount (default /sys/fs/cgroup).
	CgroupRoot string
	// CNIConfDir and CNIBinDir are the node's CNI conf and bin dirs as the
	// agent sees them (default /etc/cni/net.d, /opt/cni/bin; the DaemonSet
	// mounts the host's read-only), and CNIKubeconfig the kubeconfig
	// istio-cni writes (default: istio-cni-kubeconfig in the run dir
	// istio-cni's plugin config names, as recent Istio writes it, else
	// CNIConfDir/ZZZ-istio-cni-kubeconfig): what
	// the istio-cni health check reads (/v1/cni, CheckCNI).
	CNIConfDir, CNIBinDir, CNIKubeconfig string
	// cniKubeconfigDefault: CNIKubeconfig was not given, so the check
	// reads the kubeconfig istio-cni's plugin config says it uses.
	cniKubeconfigDefault bool
	// CNITokenReviews checks the token in istio-cni's kubeconfig with a
	// TokenReview made under the agent's own identity (its ServiceAccount,
	// allowed to create tokenreviews); nil: the token check fails, saying
	// it could not be made. CNIServiceAccount is the username the token must
	// authenticate as (default
	// system:serviceaccount:istio-system:istio-cni).
	CNITokenReviews   authnv1client.TokenReviewInterface
	CNIServiceAccount string
	// Registry receives the agent's metrics; default: a new registry.
	Registry *prometheus.Registry
	Logger   *zap.Logger
	// NoPodHistograms leaves the per-pod histograms (connect latency, SRTT,
	// connection ages: 87 of a pod side's 93 series) out of /metrics, which
	// then keeps the 6 counters a pod and side. /v1/snapshot, which the
	// judge reads, keeps them all.
	NoPodHistograms bool
	// ReadHeaderTimeout bounds slow clients; default 10s. A request (a GET,
	// no body) must also be read whole within it.
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive connection no request arrives on;
	// default 60s. Together with the read bound and the write bound
	// (30 s), no slow or idle client holds the agent's memory for long.
	IdleTimeout time.Duration
	// MaxConnections caps the connections served at once (default 128);
	// past it new ones wait in the listen backlog. Any pod can reach the
	// agent, so a flood of connections is bounded in memory and
	// goroutines, and what the cap holds back is served as the others end
	// (each is bounded by the timeouts above).
	MaxConnections int
	// HistoryEvery is how often the agent keeps a snapshot in its history
	// (/v1/history; default 30s, the orchestrator's sampling period, so a
	// baseline read from history has the samples a waited one has).
	HistoryEvery time.Duration
	// HistoryKeep is how far back the history reaches (default 1h): the
	// longest baseline read from it without a wait. A longer baseline waits
	// for the part the history does not cover.
	HistoryKeep time.Duration
	// HistoryMaxBytes bounds the history's memory (default 16 MiB); past
	// it the oldest snapshots go first. 110 pods take at most about
	// 10 MiB at the defaults with every counter busy (docs/nodeagent.md).
	HistoryMaxBytes int

	// loadProbe replaces the eBPF loader in tests.
	loadProbe func() (probe, error)
}

func (c *Config) validate() error {
	switch c.Mode {
	case "":
		c.Mode = ModeAuto
	case ModeAuto, ModeEBPF, ModeProc:
	default:
		return fmt.Errorf("mode %q: want one of %s, %s, %s", c.Mode, ModeAuto, ModeEBPF, ModeProc)
	}
	if c.GetCertificate == nil && (c.CertFile == "" || c.KeyFile == "") {
		return errors.New("cert and key files are required (TLS is mandatory), or a certificate from a signing request")
	}
	if c.Authenticator == nil && c.TokenFile == "" {
		return errors.New("token file is required (callers must present its bearer token), or a token review")
	}
	if c.Node == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("node name not set and hostname unknown: %w", err)
		}
		c.Node = h
	}
	if c.ListenAddr == "" {
		c.ListenAddr = ":9443"
	}
	if c.MaxConnections < 0 {
		return fmt.Errorf("MaxConnections %d: want 0 (the default, 128) or more", c.MaxConnections)
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = 128
	}
	if c.ProcRoot == "" {
		c.ProcRoot = "/proc"
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.CgroupRoot == "" {
		c.CgroupRoot = "/sys/fs/cgroup"
	}
	c.cniDefaults()
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.ReadHeaderTimeout == 0 {
		c.ReadHeaderTimeout = 10 * time.Second
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 60 * time.Second
	}
	if c.HistoryEvery == 0 {
		c.HistoryEvery = DefaultHistoryEvery
	}
	if c.HistoryKeep == 0 {
		c.HistoryKeep = DefaultHistoryKeep
	}
	if c.HistoryMaxBytes == 0 {
		c.HistoryMaxBytes = DefaultHistoryMaxBytes
	}
	if c.HistoryEvery < 0 || c.HistoryKeep < c.HistoryEvery {
		return fmt.Errorf("history: need 0 < every (%s) ≤ keep (%s)", c.HistoryEvery, c.HistoryKeep)
	}
	if c.HistoryMaxBytes < 0 {
		return fmt.Errorf("history max bytes %d: must be positive", c.HistoryMaxBytes)
	}
	if c.loadProbe == nil {
		c.loadProbe = loadProbe
	}
	return nil
}

func loadCert(certFile, keyFile string) (tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("loading TLS certificate %s and key %s: %w", certFile, keyFile, err)
	}
	return cert, nil
}

func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	return tok, nil
}
