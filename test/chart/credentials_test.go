package chart

import (
	"context"
	"crypto"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/agentpki"
	"github.com/nodewise/nodewise/health/remote"
	"github.com/nodewise/nodewise/nodeagent"
	"github.com/nodewise/nodewise/orchestrator/judgegate"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/test/testkit"
)

// install applies the chart with its defaults to a new simulated cluster and
// waits for its pods: an agent on every node, both orchestrator replicas.
func install(t *testing.T, nodes int) *cluster.Cluster {
	t.Helper()
	c := cluster.Start(t, cluster.Options{Nodes: nodes})
	ctx := context.Background()
	objs, err := Template(ctx, "createNamespace=true")
	if err != nil {
		t.Fatal(err)
	}
	if err := EnsureNamespace(ctx, c.Client, cluster.IstioNamespace); err != nil {
		t.Fatal(err)
	}
	if err := Apply(ctx, c.Config, objs); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 2*time.Minute, "the chart's pods to run", func() (bool, error) {
		ds, err := c.Client.AppsV1().DaemonSets(AgentNamespace).Get(ctx, "nodewise-agent", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		dep, err := c.Client.AppsV1().Deployments(Namespace).Get(ctx, "nodewise-orchestrator", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return int(ds.Status.NumberReady) == nodes && dep.Status.ReadyReplicas == 2, nil
	})
	return c
}

func podOf(t *testing.T, in Installed, app, node string) *corev1.Pod {
	t.Helper()
	p, err := in.PodOn(context.Background(), app, node)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func tokenFor(t *testing.T, in Installed, sa string, pod *corev1.Pod, audiences []string) string {
	t.Helper()
	tok, err := in.Token(context.Background(), sa, pod, audiences)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func clientAs(t *testing.T, in Installed, token string) kubernetes.Interface {
	t.Helper()
	k, err := in.ClientAs(token)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func nodeIP(t *testing.T, c *cluster.Cluster, node string) net.IP {
	t.Helper()
	n, err := c.Client.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return net.ParseIP(a.Address)
		}
	}
	t.Fatalf("node %s has no InternalIP", node)
	return nil
}

// startAgent runs a node agent (proc mode) on ip:port with the credentials
// the chart's DaemonSet gives it (Installed.AgentCredentials).
func startAgent(t *testing.T, in Installed, node string, ip net.IP, port int) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	log := zaptest.NewLogger(t).Named(node)
	cfg := nodeagent.Config{Node: node, Mode: nodeagent.ModeProc, ListenAddr: net.JoinHostPort(ip.String(), strconv.Itoa(port)),
		Resolver: nodeagent.NewStaticResolver(nil), Logger: log}
	if err := in.AgentCredentials(ctx, node, []net.IP{ip}, &cfg, log); err != nil {
		cancel()
		return err
	}
	ag, err := nodeagent.New(cfg)
	if err != nil {
		cancel()
		return err
	}
	done := make(chan error, 1)
	go func() { done <- ag.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent of %s: %v", node, err)
		}
	})
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	_, err = ag.Addr(wctx)
	return err
}

// TestChartAgentCredentials installs the chart and wires the judge's
// credentials as its manifests do, with nothing created by hand: every
// agent gets its own serving certificate from the orchestrator's signer,
// the orchestrator reaches each agent with its projected token and verifies
// each certificate against the CA it keeps. It also shows what is refused:
// another caller's token, the orchestrator's API token, a certificate for
// another node, a token not bound to a pod, and one node's certificate
// served on another node's address.
func TestChartAgentCredentials(t *testing.T) {
	c := install(t, 2)
	in := Installed{Config: c.Config, Client: c.Client}
	ctx := context.Background()
	log := zaptest.NewLogger(t)
	nodes := []string{"node-001", "node-002"}

	orchPod := podOf(t, in, "nodewise-orchestrator", "")
	orchKube := clientAs(t, in, tokenFor(t, in, "nodewise-orchestrator", orchPod, nil))
	signer, err := agentpki.NewSigner(agentpki.SignerConfig{Kube: orchKube, Namespace: Namespace, AgentUser: AgentUser, Every: time.Hour, Logger: log.Named("signer")}) // every request by the watch
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	signed := make(chan error, 1)
	go func() { signed <- signer.Run(sctx) }()
	defer func() { stop(); <-signed }()

	port := testkit.FreePort(t, nodeIP(t, c, nodes[0]).String())
	agentKube := map[string]kubernetes.Interface{}
	for _, n := range nodes {
		agentKube[n] = clientAs(t, in, tokenFor(t, in, "nodewise-agent", podOf(t, in, "nodewise-agent", n), nil))
		if err := startAgent(t, in, n, nodeIP(t, c, n), port); err != nil {
			t.Fatalf("agent of %s: %v", n, err)
		}
	}

	dir := t.TempDir()
	writeToken := func(name, tok string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	agentsAs := func(tokenFile string, port int) *remote.Agent {
		a, err := judgegate.Agents(judgegate.AgentConfig{RootCAs: signer.Pool, VerifyNodeName: true, TokenFile: tokenFile, Port: port}, orchKube, log)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	projected := writeToken("orchestrator", tokenFor(t, in, "nodewise-orchestrator", orchPod, []string{agentpki.DefaultAudience}))
	judge := agentsAs(projected, port)
	for _, n := range nodes {
		s, err := judge.Snapshot(ctx, n)
		if err != nil {
			t.Fatalf("the orchestrator could not read the agent of %s: %v", n, err)
		}
		if s.Node != n {
			t.Errorf("snapshot of %s names node %s", n, s.Node)
		}
	}

	// Callers the agents must refuse.
	agentPod := podOf(t, in, "nodewise-agent", nodes[0])
	for name, tok := range map[string]string{
		"the agent ServiceAccount's token for the agents' audience": tokenFor(t, in, "nodewise-agent", agentPod, []string{agentpki.DefaultAudience}),
		"the orchestrator's API token (wrong audience)":             tokenFor(t, in, "nodewise-orchestrator", orchPod, nil),
	} {
		_, err := agentsAs(writeToken(strings.ReplaceAll(name, " ", "-"), tok), port).Snapshot(ctx, nodes[0])
		if err == nil || !strings.Contains(err.Error(), "401") {
			t.Errorf("%s: snapshot error %v, want 401 Unauthorized", name, err)
		}
	}

	// Certificates the signer must deny.
	deny := func(what string, kube kubernetes.Interface, node string, ip net.IP, want string) {
		t.Helper()
		req, err := agentpki.NewRequester(agentpki.RequesterConfig{Kube: kube, Node: node, IPs: []net.IP{ip}, Timeout: time.Minute, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		err = req.Obtain(ctx)
		if err == nil || !strings.Contains(err.Error(), "denied") || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want denied: ...%s...", what, err, want)
		}
	}
	deny("node-001's agent asking for node-002", agentKube[nodes[0]], nodes[1], nodeIP(t, c, nodes[1]), "common name")
	deny("node-001's agent asking for node-002's IP", agentKube[nodes[0]], nodes[0], nodeIP(t, c, nodes[1]), "is not an InternalIP of node node-001")
	deny("a token bound to no pod", clientAs(t, in, tokenFor(t, in, "nodewise-agent", nil, nil)), nodes[0], nodeIP(t, c, nodes[0]), "not bound to a pod")

	// node-001's certificate served on node-002's address: the orchestrator
	// dials node-002's InternalIP and verifies node-002's name, as
	// --agent-issuer does, so the name check refuses it.
	impostorPort := testkit.FreePort(t, nodeIP(t, c, nodes[1]).String())
	if err := startImpostor(t, agentKube[nodes[0]], nodes[0], nodeIP(t, c, nodes[0]), nodeIP(t, c, nodes[1]), impostorPort); err != nil {
		t.Fatal(err)
	}
	_, err = agentsAs(projected, impostorPort).Snapshot(ctx, nodes[1])
	if err == nil || !strings.Contains(err.Error(), "certificate is valid for "+nodes[0]+", not "+nodes[1]) {
		t.Errorf("node-001's certificate on node-002's address: %v, want a certificate name mismatch", err)
	}

	// The CA and its public bundle are where the runbook says.
	sec, err := c.Client.CoreV1().Secrets(Namespace).Get(ctx, agentpki.CASecretName, metav1.GetOptions{})
	if err != nil || len(sec.Data["tls.key"]) == 0 {
		t.Errorf("CA Secret: %v", err)
	}
	cm, err := c.Client.CoreV1().ConfigMaps(Namespace).Get(ctx, agentpki.BundleConfigMapName, metav1.GetOptions{})
	if err != nil || !strings.Contains(cm.Data["ca.crt"], "BEGIN CERTIFICATE") || strings.Contains(cm.Data["ca.crt"], "PRIVATE KEY") {
		t.Errorf("CA bundle ConfigMap: %v %q", err, cm.Data["ca.crt"])
	}
}

// startImpostor serves the certificate node's agent obtained for its own
// IP on another address.
func startImpostor(t *testing.T, kube kubernetes.Interface, node string, own, other net.IP, port int) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := agentpki.NewRequester(agentpki.RequesterConfig{Kube: kube, Node: node, IPs: []net.IP{own}, Timeout: time.Minute})
	if err != nil {
		return err
	}
	if err := req.Obtain(ctx); err != nil {
		return err
	}
	ag, err := nodeagent.New(nodeagent.Config{Node: "node-002", Mode: nodeagent.ModeProc, ListenAddr: net.JoinHostPort(other.String(), strconv.Itoa(port)),
		GetCertificate: req.GetCertificate, Authenticator: allowAll{}, Resolver: nodeagent.NewStaticResolver(nil)})
	if err != nil {
		return err
	}
	go func() { _ = ag.Run(ctx) }()
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if _, err := ag.Addr(wctx); err != nil {
		return fmt.Errorf("impostor: %w", err)
	}
	return nil
}

type allowAll struct{}

func (allowAll) Authenticate(*http.Request) error { return nil }

// TestChartAgentCertificateRenews: with the chart's RBAC only, the agent's
// certificate manager (client-go's) replaces its certificate with a new
// key's before the old one expires, for the same name and address, and the
// new one is what the agent serves. The signer's clock runs behind, so the
// first certificate has 30 s left when issued and is already past its
// renewal point.
func TestChartAgentCertificateRenews(t *testing.T) {
	c := install(t, 1)
	in := Installed{Config: c.Config, Client: c.Client}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := zaptest.NewLogger(t)
	node := "node-001"
	ip := nodeIP(t, c, node)

	const life = 10 * time.Minute // the signer's shortest
	behind := life - 30*time.Second
	orchKube := clientAs(t, in, tokenFor(t, in, "nodewise-orchestrator", podOf(t, in, "nodewise-orchestrator", ""), nil))
	signer, err := agentpki.NewSigner(agentpki.SignerConfig{Kube: orchKube, Namespace: Namespace, AgentUser: AgentUser, Every: time.Hour, CertValidity: life,
		Now: func() time.Time { return time.Now().Add(-behind) }, Logger: log.Named("signer")})
	if err != nil {
		t.Fatal(err)
	}
	signed := make(chan error, 1)
	go func() { signed <- signer.Run(ctx) }()
	defer func() { cancel(); <-signed }()

	agentKube := clientAs(t, in, tokenFor(t, in, "nodewise-agent", podOf(t, in, "nodewise-agent", node), nil))
	req, err := agentpki.NewRequester(agentpki.RequesterConfig{Kube: agentKube, Node: node, IPs: []net.IP{ip}, Timeout: time.Minute, Logger: log.Named("certificate")})
	if err != nil {
		t.Fatal(err)
	}
	if err := req.Obtain(ctx); err != nil {
		t.Fatal(err)
	}
	first, err := req.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(first.Leaf.NotAfter); left > time.Minute {
		t.Fatalf("the first certificate has %s left, want at most 30 s (the signer's clock runs %s behind)", left, behind)
	}
	ran := make(chan error, 1)
	go func() { ran <- req.Run(ctx) }()
	defer func() { cancel(); <-ran }()

	var renewed *tls.Certificate
	testkit.WaitFor(t, 25*time.Second, "a renewed certificate before the first expires", func() (bool, error) {
		cur, err := req.GetCertificate(nil)
		if err != nil {
			return false, err
		}
		renewed = cur
		return cur.Leaf.SerialNumber.Cmp(first.Leaf.SerialNumber) != 0, nil
	})
	if now := time.Now(); !now.Before(first.Leaf.NotAfter) {
		t.Errorf("renewed at %s, after the first certificate expired at %s", now, first.Leaf.NotAfter)
	}
	if renewed.Leaf.NotAfter.Before(first.Leaf.NotAfter) { // same second when renewed at once
		t.Errorf("renewed certificate ends %s, before the first's %s", renewed.Leaf.NotAfter, first.Leaf.NotAfter)
	}
	if renewed.Leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool }).Equal(first.Leaf.PublicKey) {
		t.Error("the renewed certificate reuses the first key; the manager generates a new one")
	}
	if cn, dns, ips := renewed.Leaf.Subject.CommonName, renewed.Leaf.DNSNames, renewed.Leaf.IPAddresses; cn != "nodewise-agent:"+node ||
		len(dns) != 1 || dns[0] != node || len(ips) != 1 || !ips[0].Equal(ip) {
		t.Errorf("renewed certificate for CN %q DNS %q IPs %v, want nodewise-agent:%s, [%s], [%s]", cn, dns, ips, node, node, ip)
	}
	if err := renewed.Leaf.VerifyHostname(node); err != nil {
		t.Errorf("renewed certificate: %v", err)
	}
	csrs, err := c.Client.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ours int
	for _, r := range csrs.Items {
		if v := r.Spec.Extra[agentpki.NodeNameExtra]; r.Spec.Username != "system:serviceaccount:"+AgentNamespace+":nodewise-agent" || len(v) != 1 || v[0] != node {
			continue
		}
		ours++
		if r.Spec.SignerName != agentpki.SignerName {
			t.Errorf("the agent's request %s is for signer %q, want %s", r.Name, r.Spec.SignerName, agentpki.SignerName)
		}
	}
	if ours < 2 {
		t.Errorf("%d certificate requests from %s's agent, want the first and at least one renewal", ours, node)
	}
}
