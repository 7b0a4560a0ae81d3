package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/nodewise/nodewise/clusters"
	"github.com/nodewise/nodewise/test/testkit"
)

// TestFleetAcrossClusters: `nodewise fleet` reads two live clusters and a
// third that cannot be reached, through kubeconfig contexts and through
// cluster Secrets, and prints all three: each live one with its revisions,
// data plane and rollouts, the dead one with its error (exit 1).
func TestFleetAcrossClusters(t *testing.T) {
	t.Parallel()
	staging, prod := newEnv(t, 2, 1), newEnv(t, 3, 1)
	staging.apply(rollout("ambient-1-28", nil))
	bin := testkit.Binary(t, "nodewise")

	merged := clientcmdapi.NewConfig()
	kubeconfigs := map[string][]byte{}
	for name, e := range map[string]*env{"staging": staging, "prod": prod} {
		raw, err := clientcmd.LoadFromFile(e.c.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		cur := raw.Contexts[raw.CurrentContext]
		merged.Clusters[name], merged.AuthInfos[name] = raw.Clusters[cur.Cluster], raw.AuthInfos[cur.AuthInfo]
		merged.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
		if kubeconfigs[name], err = os.ReadFile(e.c.Kubeconfig); err != nil {
			t.Fatal(err)
		}
	}
	// Nothing listens on port 1 of loopback: refused at once.
	merged.Clusters["gone"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1", InsecureSkipTLSVerify: true}
	merged.AuthInfos["gone"] = &clientcmdapi.AuthInfo{Token: "x"}
	merged.Contexts["gone"] = &clientcmdapi.Context{Cluster: "gone", AuthInfo: "gone"}
	merged.CurrentContext = "staging"
	path := filepath.Join(t.TempDir(), "fleet.kubeconfig")
	if err := clientcmd.WriteToFile(*merged, path); err != nil {
		t.Fatal(err)
	}

	run := func(args ...string) (string, string, error) {
		var out, errOut strings.Builder
		cmd := exec.Command(bin, append([]string{"--kubeconfig", path, "fleet", "--timeout", "20s"}, args...)...)
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		return out.String(), errOut.String(), err
	}
	out, errOut, err := run()
	if code := exitCodeOf(err); code != 1 || !strings.Contains(errOut, "1 of 3 clusters could not be read: gone") {
		t.Errorf("all contexts: exit %d, stderr %q; want 1 naming gone", code, errOut)
	}
	for _, want := range []string{"gone", "unreachable: ", "connection refused", "staging", "prod", "1.27.3", "ztunnel", "istio-cni", "NodeRollout", "ambient-1-28"} {
		if !strings.Contains(out, want) {
			t.Errorf("all contexts: %q missing from\n%s", want, out)
		}
	}

	out, _, err = run("--contexts", "prod,staging", "-o", "json")
	var rs []clusters.Report
	if jerr := json.Unmarshal([]byte(out), &rs); err != nil || jerr != nil || len(rs) != 2 {
		t.Fatalf("two contexts -o json: %v %v\n%s", err, jerr, out)
	}
	nodes := func(r clusters.Report, component string) int {
		n := 0
		for _, p := range r.DataPlane {
			if p.Component == component {
				n += p.Count
			}
		}
		return n
	}
	if rs[0].Cluster != "prod" || nodes(rs[0], "ztunnel") != 3 || len(rs[0].Upgrades) != 0 ||
		rs[1].Cluster != "staging" || nodes(rs[1], "ztunnel") != 2 || len(rs[1].Upgrades) != 1 || len(rs[1].Revisions) == 0 {
		t.Errorf("two contexts: %+v", rs)
	}
	if _, errOut, err := run("--contexts", "nowhere"); exitCodeOf(err) != 1 || !strings.Contains(errOut, `context "nowhere" is not in the kubeconfig`) {
		t.Errorf("an unknown context: %v %q", err, errOut)
	}

	// The in-cluster form: Cluster API's kubeconfig Secrets in staging,
	// one per cluster, and one whose kubeconfig runs a plugin (refused).
	ctx := context.Background()
	plugin := strings.Replace(string(kubeconfigs["prod"]), "users:\n", "users:\n- name: plugin\n  user:\n    exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/true}\n", 1)
	for name, data := range map[string][]byte{"staging-kubeconfig": kubeconfigs["staging"], "prod-kubeconfig": kubeconfigs["prod"], "plugin-kubeconfig": []byte(plugin)} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"cluster.x-k8s.io/cluster-name": strings.TrimSuffix(name, "-kubeconfig")}},
			Data: map[string][]byte{"value": data}}
		if _, err := staging.c.Client.CoreV1().Secrets("default").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	out, errOut, err = run("--cluster-secrets", "default")
	if code := exitCodeOf(err); code != 1 || !strings.Contains(errOut, "plugin-kubeconfig") {
		t.Errorf("cluster Secrets: exit %d, stderr %q; want 1 naming plugin-kubeconfig", code, errOut)
	}
	for _, want := range []string{"prod-kubeconfig", "staging-kubeconfig", "takes its credentials from a plugin", "ambient-1-28"} {
		if !strings.Contains(out, want) {
			t.Errorf("cluster Secrets: %q missing from\n%s", want, out)
		}
	}
}

func exitCodeOf(err error) int {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
