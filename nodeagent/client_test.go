package nodeagent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/nodewise/nodewise/bpf"
	"github.com/nodewise/nodewise/health"
)

// TestHealthAgentClientReadsTheAgent checks the two ends of the credential
// agree: the judge's client (health.AgentClient, go-retryablehttp) reads a
// running agent with the CA and token file, and a wrong token fails closed.
func TestHealthAgentClientReadsTheAgent(t *testing.T) {
	fp := &fakeProbe{counters: map[bpf.Key]*bpf.Counters{{Netns: 7, Side: bpf.SideApp}: {ResetsReceived: 42}}}
	ra := startAgent(t, ModeEBPF, NewStaticResolver(map[uint32]Pod{7: {Namespace: "ns", Name: "p", UID: "u"}}), fakeLoaded(fp))
	client := func(tokenFile string) *health.AgentClient {
		c, err := health.NewAgentClient(health.AgentClientConfig{
			CAFile:    ra.files.cert, // self-signed: the certificate is its own CA
			TokenFile: tokenFile,
			URLFor:    func(context.Context, string) (string, error) { return ra.url, nil },
			RetryMax:  -1,
		})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	s, err := client(ra.files.token).Snapshot(context.Background(), "test-node")
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	if got := podSide(t, s, "p", health.SideApp).ResetsReceived; got != 42 || s.Node != "test-node" {
		t.Errorf("snapshot through health.AgentClient: node %q resets %d", s.Node, got)
	}
	wrong := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(wrong, []byte("not-the-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := client(wrong).Snapshot(context.Background(), "test-node"); !errors.Is(err, health.ErrAgentUnavailable) {
		t.Errorf("wrong token: %v, want ErrAgentUnavailable", err)
	}
}
