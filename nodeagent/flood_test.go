package nodeagent

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/client-go/rest"

	"github.com/nodewise/nodewise/agentpki"
	"github.com/nodewise/nodewise/bpf"
	"github.com/nodewise/nodewise/health/remote"
)

// fakeTokenReviews is the API server's TokenReview endpoint on loopback: the
// tokens in good are the orchestrator's, every other token is refused. It
// counts the reviews it answered.
type fakeTokenReviews struct {
	good    map[string]bool
	reviews atomic.Int64
}

func (f *fakeTokenReviews) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/apis/authentication.k8s.io/v1/tokenreviews" {
		http.NotFound(w, r)
		return
	}
	var tr authnv1.TokenReview
	if err := json.NewDecoder(r.Body).Decode(&tr); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	f.reviews.Add(1)
	tr.APIVersion, tr.Kind = "authentication.k8s.io/v1", "TokenReview"
	if f.good[tr.Spec.Token] {
		tr.Status = authnv1.TokenReviewStatus{Authenticated: true, Audiences: tr.Spec.Audiences,
			User: authnv1.UserInfo{Username: "system:serviceaccount:nodewise-system:nodewise-orchestrator"}}
	} else {
		tr.Status = authnv1.TokenReviewStatus{Error: "invalid bearer token"}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&tr)
}

// floodSeconds is how long TestTokenFloodLeavesTheJudgeServed floods: 6 s in
// make test, NODEWISE_FLOOD_SECONDS=60 for the full run.
func floodSeconds(t *testing.T) time.Duration {
	s := os.Getenv("NODEWISE_FLOOD_SECONDS")
	if s == "" {
		return 6 * time.Second
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 600 {
		t.Fatalf("NODEWISE_FLOOD_SECONDS=%q: want whole seconds, 1 to 600", s)
	}
	return time.Duration(n) * time.Second
}

// TestTokenFloodLeavesTheJudgeServed floods the agent on loopback with 200
// requests a second, each with a new random bearer token, from 127.0.0.2,
// while the judge's client (remote.Agent, from 127.0.0.1) polls twice
// a second with the orchestrator's token. The review cache's TTL is 2 s, so
// the judge's verdict expires and is reviewed again several times under
// the flood, and halfway through the judge's token rotates to a new one (as
// the kubelet rotates a projected token). Every poll of the judge must
// succeed within its client's timeout. It prints the figures.
func TestTokenFloodLeavesTheJudgeServed(t *testing.T) {
	dur := floodSeconds(t)
	const rate = 200
	api := &fakeTokenReviews{good: map[string]bool{"judge-token-1": true, "judge-token-2": true}}
	apiSrv := httptest.NewServer(api)
	defer apiSrv.Close()
	kube, err := agentpki.ReviewClient(&rest.Config{Host: apiSrv.URL, ContentConfig: rest.ContentConfig{ContentType: "application/json", AcceptContentTypes: "application/json"}})
	if err != nil {
		t.Fatal(err)
	}
	rev, err := agentpki.NewReviewer(agentpki.ReviewerConfig{Kube: kube, TTL: 2 * time.Second,
		Allowed: []string{"system:serviceaccount:nodewise-system:nodewise-orchestrator"}})
	if err != nil {
		t.Fatal(err)
	}
	fp := &fakeProbe{counters: map[bpf.Key]*bpf.Counters{{Netns: 7, Side: bpf.SideApp}: {ResetsReceived: 1}}}
	ra := startAgent(t, ModeEBPF, NewStaticResolver(map[uint32]Pod{7: {Namespace: "ns", Name: "p", UID: "u"}}), func(c *Config) {
		fakeLoaded(fp)(c)
		c.TokenFile, c.Authenticator = "", rev
	})

	tokenFile := filepath.Join(t.TempDir(), "token")
	setToken := func(tok string) {
		if err := os.WriteFile(tokenFile, []byte(tok), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	setToken("judge-token-1")
	judge, err := remote.NewAgent(remote.AgentConfig{CAFile: ra.files.cert, TokenFile: tokenFile, RetryMax: -1,
		URLFor: func(context.Context, string) (string, error) { return ra.url, nil }})
	if err != nil {
		t.Fatal(err)
	}

	// The flood: its own transport from 127.0.0.2 (another pod), a
	// bounded number of connections, a short timeout per request.
	flood := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: ra.files.pool},
		DialContext:     (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext,
		MaxConnsPerHost: 64, MaxIdleConnsPerHost: 64,
	}}
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	var sent, answered atomic.Int64
	var codes sync.Map // status code -> *atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second / rate)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			sent.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				b := make([]byte, 24)
				_, _ = rand.Read(b)
				req, _ := http.NewRequest(http.MethodGet, ra.url+"/v1/snapshot", nil)
				req.Header.Set("Authorization", "Bearer "+hex.EncodeToString(b))
				resp, err := flood.Do(req)
				code := 0
				if err == nil {
					code = resp.StatusCode
					resp.Body.Close()
					answered.Add(1)
				}
				n, _ := codes.LoadOrStore(code, new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
			}()
		}
	}()

	var polls, failed int
	var slowest time.Duration
	var firstErr error
	rotated := false
	start := time.Now()
	for ctx.Err() == nil {
		if !rotated && time.Since(start) > dur/2 {
			setToken("judge-token-2")
			rotated = true
		}
		t0 := time.Now()
		_, err := judge.Snapshot(context.Background(), "test-node")
		took := time.Since(t0)
		slowest = max(slowest, took)
		polls++
		if err != nil {
			failed++
			if firstErr == nil {
				firstErr = err
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
	wg.Wait()
	var byCode string
	codes.Range(func(k, v any) bool {
		byCode += fmt.Sprintf(" %d:%d", k, v.(*atomic.Int64).Load())
		return true
	})
	t.Logf("flood %s at %d/s: %d sent, %d answered (status:count%s; 0 = no answer); %d TokenReviews; judge %d polls, %d failed, slowest %s",
		dur, rate, sent.Load(), answered.Load(), byCode, api.reviews.Load(), polls, failed, slowest.Round(time.Millisecond))
	if failed > 0 {
		t.Errorf("%d of the judge's %d polls failed under the flood; first: %v", failed, polls, firstErr)
	}
	if polls < int(dur/time.Second) {
		t.Errorf("the judge polled %d times in %s: want about two a second", polls, dur)
	}
}
