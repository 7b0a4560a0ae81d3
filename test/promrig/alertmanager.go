package promrig

import (
	"encoding/json"
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
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "alertmanager.yml"), "--storage.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--cluster.listen-address=", "--log.level=warn")
	srv := &Server{URL: "http://" + addr}
	srv.cmd = run(t, cmd, filepath.Join(dir, "alertmanager.log"))
	waitReady(t, "alertmanager", srv.URL)
	return srv
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
