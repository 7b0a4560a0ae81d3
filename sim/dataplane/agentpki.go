package dataplane

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/nodewise/nodewise/sim/simpki"
)

// agentPKI is what the node agents and the orchestrator share, as the
// agent DaemonSet's Secret would hold it: a CA, one serving certificate per
// node (its InternalIP as SAN, so the orchestrator verifies the IP it dialled)
// and the bearer token.
type agentPKI struct {
	caFile, tokenFile string
	certs             map[string][2]string // node → cert file, key file
}

// writeAgentPKI writes a fresh test CA, a certificate per node and a random
// token into dir.
func writeAgentPKI(dir string, nodes []AgentNode) (*agentPKI, error) {
	const life = 24 * time.Hour
	ca, err := simpki.NewCA("nodewise-test-agent-ca", life)
	if err != nil {
		return nil, err
	}
	p := &agentPKI{caFile: filepath.Join(dir, "agent-ca.pem"), tokenFile: filepath.Join(dir, "agent-token"), certs: map[string][2]string{}}
	if err := os.WriteFile(p.caFile, ca.CertPEM(), 0o600); err != nil {
		return nil, err
	}
	tok, err := simpki.Token()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.tokenFile, []byte(tok+"\n"), 0o600); err != nil {
		return nil, err
	}
	for _, n := range nodes {
		ip := net.ParseIP(n.IP)
		if ip == nil {
			return nil, fmt.Errorf("node %s: InternalIP %q is not an IP", n.Name, n.IP)
		}
		certPEM, keyPEM, err := ca.IssueServing("nodewise-agent "+n.Name, []net.IP{ip}, []string{n.Name}, life)
		if err != nil {
			return nil, err
		}
		cert, key := filepath.Join(dir, "agent-"+n.Name+".pem"), filepath.Join(dir, "agent-"+n.Name+"-key.pem")
		if err := os.WriteFile(cert, certPEM, 0o600); err != nil {
			return nil, err
		}
		if err := os.WriteFile(key, keyPEM, 0o600); err != nil {
			return nil, err
		}
		p.certs[n.Name] = [2]string{cert, key}
	}
	return p, nil
}
