package kubeconfig

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// writeConfig writes a kubeconfig with one cluster, user and context.
func writeConfig(t *testing.T, path, name, server string, current bool) {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: "t-" + name}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	if current {
		cfg.CurrentContext = name
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
}

// A KUBECONFIG list is merged as kubectl merges it, and --context picks a
// context from any of its files.
func TestKubeconfigListAndContext(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	writeConfig(t, a, "alpha", "https://alpha.example:6443", true)
	writeConfig(t, b, "beta", "https://beta.example:6443", false)
	t.Setenv("KUBECONFIG", a+string(os.PathListSeparator)+b)
	t.Setenv("KUBERNETES_SERVICE_HOST", "")

	cfg, err := Load("")
	if err != nil || cfg.Host != "https://alpha.example:6443" || cfg.Timeout != 0 {
		t.Fatalf("Load with KUBECONFIG=a:b: %v host %q timeout %s; want alpha's server and no timeout", err, cfg.Host, cfg.Timeout)
	}
	f := NewFlags()
	ctx := "beta"
	f.Context = &ctx
	cfg, err = RESTConfig(f)
	if err != nil || cfg.Host != "https://beta.example:6443" || cfg.BearerToken != "t-beta" {
		t.Fatalf("--context beta: %v %+v", err, cfg)
	}
	if cfg.Timeout != 30*time.Second {
		t.Errorf("CLI request timeout %s, want the 30s default", cfg.Timeout)
	}
	missing := "gamma"
	f = NewFlags()
	f.Context = &missing
	if _, err := RESTConfig(f); err == nil {
		t.Error("--context gamma (absent) succeeded")
	}
}

func TestNoConfigIsAClearError(t *testing.T) {
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	t.Setenv("HOME", t.TempDir())
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if _, err := Load(""); !errors.Is(err, ErrNoConfig) {
		t.Errorf("Load without any kubeconfig: %v; want ErrNoConfig rather than localhost:8080", err)
	}
	if _, err := Load("/nonexistent/kubeconfig"); err == nil {
		t.Error("an explicit missing kubeconfig loaded")
	}
}
