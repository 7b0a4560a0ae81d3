package agentpki

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net"
	"strings"
	"testing"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestSignerIssuesOnlyForTheNodesInternalIP: the agent of node-a may name
// node-a's InternalIP, never an ExternalIP (an address the node writes into
// its own status and that other nodes' traffic reaches through the outside).
func TestSignerIssuesOnlyForTheNodesInternalIP(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "10.0.0.7"}, {Type: corev1.NodeExternalIP, Address: "203.0.113.9"},
	}}}
	s, err := NewSigner(SignerConfig{Kube: fake.NewClientset(node), Namespace: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	request := func(ip string) *certv1.CertificateSigningRequest {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
			Subject: pkix.Name{CommonName: "nodewise-agent:node-a"}, DNSNames: []string{"node-a"}, IPAddresses: []net.IP{net.ParseIP(ip)},
		}, key)
		if err != nil {
			t.Fatal(err)
		}
		return &certv1.CertificateSigningRequest{Spec: certv1.CertificateSigningRequestSpec{
			Request: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), SignerName: SignerName,
			Usages:   []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth},
			Username: "system:serviceaccount:ns:nodewise-agent", Extra: map[string]certv1.ExtraValue{NodeNameExtra: {"node-a"}},
		}}
	}
	if _, _, err := s.check(context.Background(), request("10.0.0.7")); err != nil {
		t.Errorf("the node's InternalIP: %v", err)
	}
	if _, _, err := s.check(context.Background(), request("203.0.113.9")); err == nil || !strings.Contains(err.Error(), "InternalIP") {
		t.Errorf("the node's ExternalIP: %v, want a refusal naming InternalIP", err)
	}
}
