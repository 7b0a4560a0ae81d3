package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/nodeagent"
)

// AgentNode is one simulated node an agent runs for.
type AgentNode struct {
	Name string
	IP   string // the node's InternalIP, where its agent listens
}

// AgentsConfig configures the node agents of a live data plane.
type AgentsConfig struct {
	Nodes []AgentNode // required
	// Port is where every agent listens on its node's IP (default 9443, the
	// orchestrator's --agent-port default).
	Port int
	// Dir receives the CA, the serving certificates and the token (required).
	Dir string
	Log *zap.Logger
	// Credentials, when set, gives each agent its serving certificate and
	// its check of callers (nodeagent.Config's GetCertificate and
	// Authenticator) instead of the test CA and shared token: the credentials
	// the chart wires (package agentpki). Agents.CAFile and TokenFile are then empty.
	Credentials func(ctx context.Context, node AgentNode, cfg *nodeagent.Config) error
	// HistoryEvery is how often each agent keeps a snapshot in its history
	// (nodeagent.Config.HistoryEvery; default its 30 s). A baseline shorter
	// than it, read back from the history, starts at the orchestrator's
	// first sample of its own instead: seconds before the swap when the
	// agent started long enough before the preflight that no wait is due.
	HistoryEvery time.Duration
}

// Agents are the real node agents of the simulated nodes, one per node, in
// this process: eBPF mode, TLS with a test CA, a bearer token. The eBPF
// programs of every agent see every namespace on the machine; each agent
// attributes only its own node's pods (DataPlane.Resolver), so each reports
// what the node agent of that node would.
type Agents struct {
	// CAFile, TokenFile and Port are what the orchestrator needs to reach
	// them (judgegate.AgentConfig; --agent-ca, --agent-token-file, --agent-port).
	CAFile, TokenFile string
	Port              int

	agents map[string]*nodeagent.Agent
	cancel context.CancelFunc
	done   chan error
	n      int
}

// StartAgents starts one node agent per node and waits until each listens.
// Start them before traffic: an agent counts only the connections it saw
// being established. Close stops them and unloads their programs.
func (d *DataPlane) StartAgents(ctx context.Context, cfg AgentsConfig) (*Agents, error) {
	if len(cfg.Nodes) == 0 || cfg.Dir == "" {
		return nil, errors.New("dataplane.AgentsConfig: Nodes and Dir are required")
	}
	if cfg.Port == 0 {
		cfg.Port = 9443
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	pki := &agentPKI{}
	if cfg.Credentials == nil {
		var err error
		if pki, err = writeAgentPKI(cfg.Dir, cfg.Nodes); err != nil {
			return nil, fmt.Errorf("writing the agents' certificates: %w", err)
		}
	}
	runCtx, cancel := context.WithCancel(context.Background())
	a := &Agents{CAFile: pki.caFile, TokenFile: pki.tokenFile, Port: cfg.Port, agents: map[string]*nodeagent.Agent{},
		cancel: cancel, done: make(chan error, len(cfg.Nodes))}
	for _, n := range cfg.Nodes {
		cert := pki.certs[n.Name]
		cniConf, cniBin, err := d.CNIDirs(n.Name)
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("CNI dirs of node %s: %w", n.Name, err)
		}
		acfg := nodeagent.Config{
			Node: n.Name, Mode: nodeagent.ModeEBPF, ListenAddr: net.JoinHostPort(n.IP, strconv.Itoa(cfg.Port)),
			CertFile: cert[0], KeyFile: cert[1], TokenFile: pki.tokenFile, Version: "live-dataplane",
			Resolver: d.Resolver(n.Name), Mesh: d.Mesh(n.Name), Logger: cfg.Log.Named(n.Name), HistoryEvery: cfg.HistoryEvery,
			CNIConfDir: cniConf, CNIBinDir: cniBin,
		}
		d.mu.Lock()
		if d.client != nil {
			// istio-cni's token is reviewed with the test cluster's client
			// unless Credentials gives the agent its own.
			acfg.CNITokenReviews = d.client.AuthenticationV1().TokenReviews()
		}
		d.mu.Unlock()
		if cfg.Credentials != nil {
			if err := cfg.Credentials(ctx, n, &acfg); err != nil {
				a.Close()
				return nil, fmt.Errorf("credentials of the node agent of %s: %w", n.Name, err)
			}
		}
		ag, err := nodeagent.New(acfg)
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("node agent of %s: %w", n.Name, err)
		}
		a.agents[n.Name] = ag
		a.n++
		go func() { a.done <- ag.Run(runCtx) }()
		// Generous: the first agent loads the eBPF programs (parsing the
		// kernel's BTF), which takes long on a loaded machine.
		wctx, wcancel := context.WithTimeout(ctx, 90*time.Second)
		_, err = ag.Addr(wctx)
		wcancel()
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("node agent of %s did not start: %w", n.Name, a.firstError(err))
		}
	}
	return a, nil
}

// firstError prefers an agent's own error (a port in use, eBPF that did not
// load) over the timeout that reported it.
func (a *Agents) firstError(err error) error {
	select {
	case e := <-a.done:
		a.n--
		if e != nil {
			return e
		}
	case <-time.After(100 * time.Millisecond):
	}
	return err
}

// Snapshot reads one node's agent directly (no HTTP): what it would serve.
func (a *Agents) Snapshot(node string) (wire.Snapshot, error) {
	ag, ok := a.agents[node]
	if !ok {
		return wire.Snapshot{}, fmt.Errorf("no agent on node %s", node)
	}
	return ag.Snapshot()
}

// Nodes lists the nodes that have an agent.
func (a *Agents) Nodes() []string {
	out := make([]string, 0, len(a.agents))
	for n := range a.agents {
		out = append(out, n)
	}
	return out
}

// Close stops every agent (their listeners close, their eBPF programs are
// detached and unloaded) and waits for them.
func (a *Agents) Close() error {
	a.cancel()
	var errs []error
	for ; a.n > 0; a.n-- {
		if err := <-a.done; err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
