package nodeagent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nodewise/nodewise/bpf"
	"github.com/nodewise/nodewise/health/record"
	"github.com/nodewise/nodewise/health/remote"
	"github.com/nodewise/nodewise/health/wire"
)

// TestHealthAgentClientReadsTheAgent checks the two ends of the credential
// agree: the judge's client (remote.Agent, go-retryablehttp) reads a
// running agent with the CA and token file, and a wrong token fails closed.
func TestHealthAgentClientReadsTheAgent(t *testing.T) {
	fp := &fakeProbe{counters: map[bpf.Key]*bpf.Counters{{Netns: 7, Side: bpf.SideApp}: {ResetsReceived: 42}}}
	ra := startAgent(t, ModeEBPF, NewStaticResolver(map[uint32]Pod{7: {Namespace: "ns", Name: "p", UID: "u"}}), fakeLoaded(fp))
	client := func(tokenFile string) *remote.Agent {
		c, err := remote.NewAgent(remote.AgentConfig{
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
	if got := podSide(t, s, "p", wire.SideApp).ResetsReceived; got != 42 || s.Node != "test-node" {
		t.Errorf("snapshot through remote.Agent: node %q resets %d", s.Node, got)
	}
	wrong := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(wrong, []byte("not-the-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := client(wrong).Snapshot(context.Background(), "test-node"); !errors.Is(err, remote.ErrAgentUnavailable) {
		t.Errorf("wrong token: %v, want ErrAgentUnavailable", err)
	}
}

// TestSnapshotSeqAdvancesAndTheRecorderPlacesIt: each snapshot the agent
// builds (for the API or a scrape) gets the next seq in its epoch, and a
// record.Recorder whose clock is 30 s ahead of the agent's (the agent runs
// 30 s behind) places the agent's samples on its own clock and says so.
func TestSnapshotSeqAdvancesAndTheRecorderPlacesIt(t *testing.T) {
	fp := &fakeProbe{counters: map[bpf.Key]*bpf.Counters{{Netns: 7, Side: bpf.SideApp}: {ResetsReceived: 42}}}
	ra := startAgent(t, ModeEBPF, NewStaticResolver(map[uint32]Pod{7: {Namespace: "ns", Name: "p", UID: "u"}}), fakeLoaded(fp))
	c, err := remote.NewAgent(remote.AgentConfig{CAFile: ra.files.cert, TokenFile: ra.files.token, RetryMax: -1,
		URLFor: func(context.Context, string) (string, error) { return ra.url, nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	first, err := c.Snapshot(ctx, "test-node")
	if err != nil {
		t.Fatal(err)
	}
	if code, _ := ra.get(t, "/metrics", ra.files.tokenValue); code != 200 { // a scrape builds a snapshot too
		t.Fatalf("scrape: %d", code)
	}
	second, err := c.Snapshot(ctx, "test-node")
	if err != nil {
		t.Fatal(err)
	}
	if first.Seq == 0 || second.Seq != first.Seq+2 || !second.StartTime.Equal(first.StartTime) {
		t.Errorf("seq %d then %d (start %s, %s): want consecutive numbers from 1 in one epoch, a scrape between",
			first.Seq, second.Seq, first.StartTime, second.StartTime)
	}

	ahead := func() time.Time { return time.Now().Add(30 * time.Second) }
	rec, err := record.NewRecorder(record.RecorderConfig{Source: c, Every: time.Second, Now: ahead})
	if err != nil {
		t.Fatal(err)
	}
	from := ahead()
	if err := rec.Track(ctx, "test-node"); err != nil {
		t.Fatal(err)
	}
	s, err := rec.Snapshot(ctx, "test-node")
	if err != nil {
		t.Fatal(err)
	}
	if s.Time.Before(from) {
		t.Errorf("sample placed at %s, before the Recorder's clock read %s when it asked", s.Time, from)
	}
	cl := rec.Clock("test-node", from, ahead(), from)
	if cl.Skewed != 2 || cl.MaxOffset > -29*time.Second || cl.MaxOffset < -31*time.Second {
		t.Errorf("clock %+v, want 2 samples 30s behind", cl)
	}
}
