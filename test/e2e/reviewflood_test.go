package e2e

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/nodewise/nodewise/agentpki"
	"github.com/nodewise/nodewise/sim/cluster"
)

// TestNewLeaderTokenServedUnderAFlood: issue 48 defect 8 (the review
// ration), on the API server of a simulated cluster. Twenty pods send the
// agent new tokens at once, three each (every source's burst): random
// strings, tokens forged to claim the orchestrator's ServiceAccount (naming
// the issuer's key, signed with another), and their own ServiceAccount
// tokens for the agents' audience. Then a new orchestrator leader's first
// token arrives, at the same instant (the Reviewer's clock stands still, so
// no ration refills): it is admitted, and so is a second new one. The
// forged and foreign tokens were refused without a review. The agent's
// client is a ServiceAccount's allowed only TokenReviews (and the issuer's
// keys, which every ServiceAccount may read by default).
func TestNewLeaderTokenServedUnderAFlood(t *testing.T) {
	t.Parallel()
	c := cluster.Start(t, cluster.Options{Nodes: 1})
	ctx := context.Background()
	const ns = "nodewise-system"
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sas := []string{"nodewise-agent", "nodewise-orchestrator"}
	for i := range 20 {
		sas = append(sas, fmt.Sprintf("app-%d", i))
	}
	for _, sa := range sas {
		if _, err := c.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	grantTokenReviews(t, c, ns, "nodewise-agent")
	token := func(sa string, audiences ...string) string {
		t.Helper()
		tr, err := c.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: audiences}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	rc := rest.AnonymousClientConfig(c.Config)
	rc.BearerToken = token("nodewise-agent")
	kube, err := agentpki.ReviewClient(rc)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	orchestrator := "system:serviceaccount:" + ns + ":nodewise-orchestrator"
	rev, err := agentpki.NewReviewer(agentpki.ReviewerConfig{Kube: kube, Allowed: []string{orchestrator}, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ask := func(tok, source string) error {
		r := httptest.NewRequest(http.MethodGet, "/v1/snapshot", nil)
		r.RemoteAddr, r.Header = source+":40000", http.Header{"Authorization": {"Bearer " + tok}}
		return rev.Authenticate(r)
	}

	forged := forgeToken(t, token("nodewise-orchestrator", agentpki.DefaultAudience), orchestrator)
	refused := map[string]int{}
	for i := range 20 {
		source := fmt.Sprintf("10.1.0.%d", i+1)
		own := token(fmt.Sprintf("app-%d", i), agentpki.DefaultAudience)
		for j, tok := range []string{randomToken(t), forged, own} {
			err := ask(tok, source)
			if err == nil {
				t.Fatalf("flood token %d from %s admitted", j, source)
			}
			refused[fmt.Sprintf("%T", err)]++
		}
	}
	t.Logf("the flood's 60 tokens refused: %v", refused)
	for i := range 2 {
		if err := ask(token("nodewise-orchestrator", agentpki.DefaultAudience), "10.0.0.1"); err != nil {
			t.Fatalf("the new leader's token %d under the flood: %v; want it admitted", i+1, err)
		}
	}
	// The forged and foreign tokens, asked again from a fresh source, are
	// refused for what they are, not for a spent ration.
	if err := ask(forged, "10.2.0.1"); err == nil || !strings.Contains(err.Error(), "not signed") {
		t.Errorf("forged orchestrator token: %v; want it refused as not signed by the issuer", err)
	}
	if err := ask(token("app-0", agentpki.DefaultAudience), "10.2.0.2"); err == nil || !strings.Contains(err.Error(), "not allowed") {
		t.Errorf("another pod's token: %v; want its caller not allowed", err)
	}
	if err := ask(token("nodewise-orchestrator"), "10.2.0.3"); err == nil || !strings.Contains(err.Error(), "audience") {
		t.Errorf("the orchestrator's token for the API server: %v; want it refused for its audience", err)
	}
}

func randomToken(t *testing.T) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// forgeToken is a token with real's header (its algorithm and the issuer's
// key ID) claiming sub for the agents' audience, signed with a key of its
// own.
func forgeToken(t *testing.T, real, sub string) string {
	t.Helper()
	hdr := strings.Split(real, ".")[0]
	claims, _ := json.Marshal(map[string]any{"aud": []string{agentpki.DefaultAudience}, "sub": sub, "exp": time.Now().Add(time.Hour).Unix(),
		"iss": "https://kubernetes.default.svc.cluster.local"})
	input := hdr + "." + base64.RawURLEncoding.EncodeToString(claims)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(input))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	return input + "." + base64.RawURLEncoding.EncodeToString(sig)
}
