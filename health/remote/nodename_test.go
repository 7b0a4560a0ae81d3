package remote

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/sim/simpki"
)

// TestAgentClientVerifiesTheNodeName: an agent at the address the client
// dials, with a certificate from the trusted CA for that address but issued
// to another node (what a compromised node can get by writing the victim's
// IP into its own status), is refused in the handshake, before the token
// is sent. The same CA's certificate for the node itself is accepted.
func TestAgentClientVerifiesTheNodeName(t *testing.T) {
	ca, err := simpki.NewCA("agents", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokFile, []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	serve := func(certNode string) (url string, tokens *atomic.Int32) {
		certPEM, keyPEM, err := ca.IssueServing("nodewise-agent:"+certNode, []net.IP{net.ParseIP("127.0.0.1")}, []string{certNode}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		tokens = new(atomic.Int32)
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.Contains(r.Header.Get("Authorization"), "s3cret") {
				tokens.Add(1)
			}
			now := time.Now()
			_ = json.NewEncoder(w).Encode(wire.Snapshot{Node: "node-a", Time: now, StartTime: now.Add(-time.Hour), Mode: wire.ModeEBPF})
		}))
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
		srv.StartTLS()
		t.Cleanup(srv.Close)
		return srv.URL, tokens
	}
	client := func(url string) *Agent {
		c, err := NewAgent(AgentConfig{RootCAs: func() *x509.CertPool { return pool }, TokenFile: tokFile, RetryMax: -1,
			VerifyNodeName: true, URLFor: func(context.Context, string) (string, error) { return url, nil }})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	impostor, stolen := serve("node-b")
	_, err = client(impostor).Snapshot(context.Background(), "node-a")
	if err == nil || !strings.Contains(err.Error(), "node-a") {
		t.Errorf("node-b's certificate at node-a's address: %v, want a refusal naming node-a", err)
	}
	if n := stolen.Load(); n != 0 {
		t.Errorf("the token reached an agent with another node's certificate %d times", n)
	}

	own, tokens := serve("node-a")
	if _, err := client(own).Snapshot(context.Background(), "node-a"); err != nil || tokens.Load() != 1 {
		t.Errorf("node-a's own certificate: %v (tokens %d)", err, tokens.Load())
	}
}
