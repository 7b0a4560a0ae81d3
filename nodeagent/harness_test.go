package nodeagent

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodewise/nodewise/health/wire"
)

// tlsFiles writes a self-signed serving certificate for 127.0.0.1, its key
// and a token file, and returns their paths and a CA pool trusting the cert.
type tlsFiles struct {
	cert, key, token string
	pool             *x509.CertPool
	tokenValue       string
}

func writeTLSFiles(t testing.TB) tlsFiles {
	t.Helper()
	dir := t.TempDir()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "nodewise-agent-test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	f := tlsFiles{
		cert:       filepath.Join(dir, "tls.crt"),
		key:        filepath.Join(dir, "tls.key"),
		token:      filepath.Join(dir, "token"),
		tokenValue: "s3cret-" + t.Name(),
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	for path, data := range map[string][]byte{
		f.cert:  certPEM,
		f.key:   pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		f.token: []byte(f.tokenValue + "\n"),
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f.pool = x509.NewCertPool()
	f.pool.AppendCertsFromPEM(certPEM)
	return f
}

// runningAgent is an agent serving on loopback, with a client holding the
// credential.
type runningAgent struct {
	*Agent
	url    string
	files  tlsFiles
	client *http.Client
	reg    *prometheus.Registry
}

func startAgent(t testing.TB, mode string, res Resolver, tweak func(*Config)) *runningAgent {
	t.Helper()
	files := writeTLSFiles(t)
	reg := prometheus.NewRegistry()
	cfg := Config{
		Node:       "test-node",
		Mode:       mode,
		ListenAddr: "127.0.0.1:0",
		CertFile:   files.cert,
		KeyFile:    files.key,
		TokenFile:  files.token,
		Resolver:   res,
		Registry:   reg,
		Version:    "test",
	}
	if tweak != nil {
		tweak(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var runErr error
	go func() {
		defer close(done)
		runErr = a.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if runErr != nil {
			t.Errorf("Run: %v", runErr)
		}
	})
	actx, acancel := context.WithTimeout(ctx, 30*time.Second)
	defer acancel()
	var addr net.Addr
	go func() {
		<-done // Run returned before listening: stop waiting
		acancel()
	}()
	addr, err = a.Addr(actx)
	if err != nil {
		<-done
		t.Fatalf("agent did not start: %v", runErr)
	}
	return &runningAgent{
		Agent:  a,
		url:    "https://" + addr.String(),
		files:  files,
		reg:    reg,
		client: newTestClient(files),
	}
}

func newTestClient(files tlsFiles) *http.Client {
	return &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: files.pool}},
	}
}

// get fetches path with the given bearer token ("" for none).
func (ra *runningAgent) get(t testing.TB, path, token string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, ra.url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := ra.client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, body
}

// snapshot fetches /v1/snapshot over HTTPS with the credential.
func (ra *runningAgent) snapshot(t testing.TB) wire.Snapshot {
	t.Helper()
	s, _, _ := ra.timedSnapshot(t)
	return s
}

// timedSnapshot is snapshot that also returns the body's size in bytes and
// how long the request took, from sending it to the body's last byte.
func (ra *runningAgent) timedSnapshot(t testing.TB) (s wire.Snapshot, size int, took time.Duration) {
	t.Helper()
	t0 := time.Now()
	code, body := ra.get(t, "/v1/snapshot", ra.files.tokenValue)
	took = time.Since(t0)
	if code != http.StatusOK {
		t.Fatalf("GET /v1/snapshot: %d %s", code, body)
	}
	if err := json.Unmarshal(body, &s); err != nil {
		t.Fatalf("decoding snapshot: %v", err)
	}
	return s, len(body), took
}

// podSide finds one pod's counters for one side.
func podSide(t testing.TB, s wire.Snapshot, name string, side wire.Side) wire.PodCounters {
	t.Helper()
	for _, p := range s.Pods {
		if p.Name == name && p.Side == side {
			return p
		}
	}
	t.Fatalf("snapshot has no %s/%s", name, side)
	return wire.PodCounters{}
}

func sum(xs []uint64) uint64 {
	var n uint64
	for _, x := range xs {
		n += x
	}
	return n
}

func describe(p wire.PodCounters) string {
	return fmt.Sprintf("%s/%s sent=%d recv=%d connects=%d fails=%v retrans=%d lat=%d ages=%v",
		p.Name, p.Side, p.ResetsSent, p.ResetsReceived, p.Connects, p.ConnectFailures, p.Retransmits, sum(p.ConnectLatency.Buckets), p.ConnAges)
}
