package promrig

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// alertmanagerConfig routes every alert to a receiver that sends nothing:
// the tests use the silences API only.
const alertmanagerConfig = "route:\n  receiver: none\nreceivers:\n  - name: none\n"

// StartAlertmanager runs Alertmanager on loopback, with its own config and
// storage in a temporary directory and no cluster peer, and returns it once
// it is ready. The process is killed when the test ends.
func StartAlertmanager(t testing.TB) *Server {
	t.Helper()
	bin := find(t, "alertmanager")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "alertmanager.yml"), []byte(alertmanagerConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	srv := &Server{URL: "http://" + addr}
	starts := 0
	srv.fresh = func(t testing.TB) {
		data := filepath.Join(dir, "data")
		if err := os.RemoveAll(data); err != nil {
			t.Fatal(err)
		}
		starts++
		cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "alertmanager.yml"), "--storage.path="+data,
			"--web.listen-address="+addr, "--cluster.listen-address=", "--log.level=warn")
		srv.cmd = run(t, cmd, filepath.Join(dir, fmt.Sprintf("alertmanager-%d.log", starts)))
		waitReady(t, "alertmanager", srv.URL)
	}
	srv.fresh(t)
	return srv
}

// Restart kills the Alertmanager and starts it again at the same address
// with empty storage, as a pod without a volume that was replaced: every
// silence is gone.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	s.fresh(t)
}

// GetJSON decodes the JSON the server answers at path into out.
func (s *Server) GetJSON(t testing.TB, path string, out any) {
	t.Helper()
	resp, err := http.Get(s.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s%s: %s", s.URL, path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("GET %s%s: %v", s.URL, path, err)
	}
}
