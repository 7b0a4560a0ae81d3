package nodeagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authnv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/istio"
)

// Where istio-cni puts its files on a node (Istio's cni/pkg/install): the
// CNI conf dir and bin dir the kubelet's runtime reads, the kubeconfig it
// writes into the conf dir, and the plugin binary it copies into the bin dir.
const (
	DefaultCNIConfDir        = "/etc/cni/net.d"
	DefaultCNIBinDir         = "/opt/cni/bin"
	DefaultCNIKubeconfigName = "ZZZ-istio-cni-kubeconfig"
	// DefaultCNIServiceAccountName is istio-cni's ServiceAccount in Istio's
	// cni chart, in the namespace istio-cni runs in.
	DefaultCNIServiceAccountName = "istio-cni"
	cniPluginName                = "istio-cni" // the binary, and the plugin's "type" in the config
	// cniRunDirKubeconfig is the kubeconfig's name in istio-cni's run dir
	// (the plugin config's cni_agent_run_dir), where recent install-cni
	// writes it instead of the conf dir.
	cniRunDirKubeconfig = "istio-cni-kubeconfig"
)

// cniTimeout bounds each check that waits on something else (the API
// server, the plugin binary).
const cniTimeout = 5 * time.Second

// cniMetricsTTL is how long a scrape reuses the last check (a scrape is
// not to send a review per request).
const cniMetricsTTL = 10 * time.Second

// cniDefaults fills the CNI paths of cfg.
func (c *Config) cniDefaults() {
	if c.CNIConfDir == "" {
		c.CNIConfDir = DefaultCNIConfDir
	}
	if c.CNIBinDir == "" {
		c.CNIBinDir = DefaultCNIBinDir
	}
	if c.CNIKubeconfig == "" {
		c.CNIKubeconfig = filepath.Join(c.CNIConfDir, DefaultCNIKubeconfigName)
		c.cniKubeconfigDefault = true
	}
	if c.CNIServiceAccount == "" {
		c.CNIServiceAccount = "system:serviceaccount:" + istio.DefaultNamespace + ":" + DefaultCNIServiceAccountName
	}
}

// CheckCNI checks istio-cni's own health on this node: its plugin in the
// CNI config the runtime uses, its kubeconfig, that kubeconfig's token
// (a TokenReview under the agent's own identity: the API server must
// authenticate it as istio-cni's ServiceAccount), and the plugin binary's
// version (compared with expected unless ""). It reads files and asks the
// API server; it changes nothing.
func (a *Agent) CheckCNI(ctx context.Context, expected string) wire.CNIHealth {
	h := wire.CNIHealth{Node: a.cfg.Node, Time: time.Now(), Expected: expected}
	conf, plugin := checkCNIConfig(a.cfg.CNIConfDir)
	h.Checks = append(h.Checks, conf)
	path := a.cfg.CNIKubeconfig
	if a.cfg.cniKubeconfigDefault {
		path = plugin.kubeconfig(path)
	}
	kc, token, err := loadCNIKubeconfig(path)
	h.Checks = append(h.Checks, kc)
	if err != nil {
		h.Checks = append(h.Checks, wire.CNICheck{Check: wire.CNICheckToken, File: path, Detail: "not checked: " + kc.Detail})
	} else {
		h.Checks = append(h.Checks, checkCNIToken(ctx, path, token, a.cfg.CNITokenReviews, a.cfg.CNIServiceAccount))
	}
	h.Checks = append(h.Checks, checkCNIPlugin(ctx, filepath.Join(a.cfg.CNIBinDir, cniPluginName), expected))
	return h
}

// cniPluginConf is what the check reads of istio-cni's entry in the CNI
// config: where its kubeconfig is.
type cniPluginConf struct {
	Type string `json:"type"`
	// RunDir is istio-cni's run dir on the node, named in the entry by the
	// istio-cni this module pins (Istio 1.31 dev; older releases name a
	// kubeconfig in the conf dir instead): its install-cni writes the
	// kubeconfig there, not in the conf dir.
	RunDir string `json:"cni_agent_run_dir"`
}

// kubeconfig is the kubeconfig istio-cni's plugin uses: the one in its run
// dir when its config names one, else def.
func (p cniPluginConf) kubeconfig(def string) string {
	if p.RunDir != "" {
		return filepath.Join(p.RunDir, cniRunDirKubeconfig)
	}
	return def
}

// checkCNIConfig reads the conf dir as the runtime does (libcni: *.conf,
// *.conflist, *.json, by name; the first is the network) and looks for the
// istio-cni plugin in that first file: chained into its plugins (Istio's
// default), or the file's own type (istio-cni's own config). It returns
// istio-cni's entry when it found one.
func checkCNIConfig(dir string) (c wire.CNICheck, plugin cniPluginConf) {
	c = wire.CNICheck{Check: wire.CNICheckConfig, File: dir}
	entries, err := os.ReadDir(dir)
	if err != nil {
		c.Detail = fmt.Sprintf("cannot read the CNI conf dir: %v", err)
		return c, plugin
	}
	var names []string
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".conf", ".conflist", ".json":
			if !e.IsDir() {
				names = append(names, e.Name())
			}
		}
	}
	if len(names) == 0 {
		c.Detail = "no CNI config (*.conf, *.conflist, *.json) in the conf dir"
		return c, plugin
	}
	sort.Strings(names)
	c.File = filepath.Join(dir, names[0])
	b, err := os.ReadFile(c.File)
	if err != nil {
		c.Detail = fmt.Sprintf("cannot read the CNI config the runtime uses: %v", err)
		return c, plugin
	}
	var conf struct {
		cniPluginConf
		Plugins []cniPluginConf `json:"plugins"`
	}
	if err := json.Unmarshal(b, &conf); err != nil {
		c.Detail = fmt.Sprintf("the CNI config the runtime uses is not JSON: %v", err)
		return c, plugin
	}
	if conf.Type == cniPluginName {
		c.OK, c.Detail = true, "istio-cni's own config, first by name"
		return c, conf.cniPluginConf
	}
	types := make([]string, 0, len(conf.Plugins))
	for _, p := range conf.Plugins {
		if p.Type == cniPluginName {
			c.OK, c.Detail = true, fmt.Sprintf("istio-cni chained into the primary config (plugin %d of %d)", len(types)+1, len(conf.Plugins))
			return c, p
		}
		types = append(types, p.Type)
	}
	c.Detail = fmt.Sprintf("no istio-cni plugin in the CNI config the runtime uses (first by name; its plugins: %s): new pods are not handed to istio-cni", strings.Join(types, ", "))
	return c, plugin
}

// loadCNIKubeconfig reads istio-cni's kubeconfig and returns the token it
// holds (inline, or from the token file it names).
func loadCNIKubeconfig(path string) (wire.CNICheck, string, error) {
	c := wire.CNICheck{Check: wire.CNICheckKubeconfig, File: path}
	fail := func(format string, args ...any) (wire.CNICheck, string, error) {
		c.Detail = fmt.Sprintf(format, args...)
		return c, "", errors.New(c.Detail)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fail("cannot read istio-cni's kubeconfig: %v", err)
	}
	cfg, err := clientcmd.Load(b)
	if err != nil {
		return fail("istio-cni's kubeconfig does not parse: %v", err)
	}
	ctxName := cfg.CurrentContext
	kctx := cfg.Contexts[ctxName]
	if kctx == nil {
		return fail("istio-cni's kubeconfig has no current context (%q)", ctxName)
	}
	cl := cfg.Clusters[kctx.Cluster]
	if cl == nil || cl.Server == "" {
		return fail("istio-cni's kubeconfig names no server (cluster %q)", kctx.Cluster)
	}
	u := cfg.AuthInfos[kctx.AuthInfo]
	if u == nil || (u.Token == "" && u.TokenFile == "") {
		return fail("istio-cni's kubeconfig holds no token (user %q)", kctx.AuthInfo)
	}
	token := u.Token
	if token == "" {
		tb, err := os.ReadFile(u.TokenFile)
		if err != nil {
			return fail("cannot read the token file istio-cni's kubeconfig names: %v", err)
		}
		if token = strings.TrimSpace(string(tb)); token == "" {
			return fail("the token file istio-cni's kubeconfig names (%s) is empty", u.TokenFile)
		}
	}
	c.OK, c.Detail = true, fmt.Sprintf("server %s, user %s", cl.Server, kctx.AuthInfo)
	return c, token, nil
}

// checkCNIToken asks the API server, with a TokenReview made under the
// agent's own identity, whom the token in istio-cni's kubeconfig
// authenticates as: the check passes only for istio-cni's ServiceAccount
// (want). The agent never sends a request with istio-cni's token. Without
// reviews (no Kubernetes API) or without an answer, the check fails: it
// cannot say the token works.
func checkCNIToken(ctx context.Context, path, token string, reviews authnv1client.TokenReviewInterface, want string) wire.CNICheck {
	c := wire.CNICheck{Check: wire.CNICheckToken, File: path}
	if reviews == nil {
		c.Detail = "not checked: the agent has no Kubernetes API to review the token with"
		return c
	}
	ctx, cancel := context.WithTimeout(ctx, cniTimeout)
	defer cancel()
	r, err := reviews.Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	switch {
	case err != nil:
		c.Detail = fmt.Sprintf("cannot tell whether the API server accepts the token (TokenReview: %v)", err)
	case !r.Status.Authenticated:
		reason := r.Status.Error
		if reason == "" {
			reason = "not authenticated"
		}
		c.Detail = "the API server refused the token in istio-cni's kubeconfig: " + reason
	case r.Status.User.Username != want:
		c.Detail = fmt.Sprintf("the token in istio-cni's kubeconfig authenticates as %s, not istio-cni's ServiceAccount %s", r.Status.User.Username, want)
	default:
		c.OK, c.Detail = true, "the API server accepted the token as "+want
	}
	return c
}

// aboutLine is what a CNI plugin built on the CNI library's skel prints when
// run with no CNI_COMMAND: istio-cni's is "CNI plugin istio-cni <version>".
var aboutLine = regexp.MustCompile(`(?m)^CNI plugin istio-cni (\S+)\s*$`)

// checkCNIPlugin runs the plugin binary with no CNI_COMMAND, with an empty
// environment and no input, and reads the version from the line it prints.
func checkCNIPlugin(ctx context.Context, path, expected string) wire.CNICheck {
	c := wire.CNICheck{Check: wire.CNICheckPlugin, File: path}
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		c.Detail = fmt.Sprintf("no plugin binary: %v", err)
		return c
	case !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0:
		c.Detail = fmt.Sprintf("the plugin is not an executable file (%s)", fi.Mode())
		return c
	}
	ctx, cancel := context.WithTimeout(ctx, cniTimeout)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, path)
	cmd.Env = []string{}
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run()
	m := aboutLine.FindSubmatch(out.Bytes())
	if m == nil {
		c.Detail = fmt.Sprintf("the plugin printed no version (\"CNI plugin istio-cni <version>\" with no CNI_COMMAND; exit: %v): %q", runErr, firstBytes(out.Bytes(), 200))
		return c
	}
	got := string(m[1])
	if expected != "" && got != expected {
		c.Detail = fmt.Sprintf("the plugin is version %s, want %s (the istio-cni pod's image)", got, expected)
		return c
	}
	c.OK, c.Detail = true, "version "+got
	if expected == "" {
		c.Detail += " (no version expected)"
	}
	return c
}

func firstBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
	}
	return strings.TrimSpace(string(b))
}

// serveCNI answers GET /v1/cni?version=<expected plugin version>.
func (a *Agent) serveCNI(w http.ResponseWriter, r *http.Request) {
	h := a.CheckCNI(r.Context(), r.URL.Query().Get("version"))
	if !h.OK() {
		a.log.Info("istio-cni health check failed", zap.Strings("problems", h.Problems()))
	}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(h); err != nil {
		a.log.Debug("writing the istio-cni health", zap.Error(err))
	}
}

// cniCollector exposes the checks as nodewise_agent_cni_check_ok{check,file},
// from a check made at most cniMetricsTTL before the scrape.
type cniCollector struct {
	check func() wire.CNIHealth
	desc  *prometheus.Desc
}

func newCNICollector(a *Agent) *cniCollector {
	var (
		mu   sync.Mutex
		last wire.CNIHealth
		at   time.Time
	)
	return &cniCollector{
		check: func() wire.CNIHealth {
			mu.Lock() // scrapes at once share one check
			defer mu.Unlock()
			if time.Since(at) >= cniMetricsTTL {
				ctx, cancel := context.WithTimeout(context.Background(), 2*cniTimeout)
				last, at = a.CheckCNI(ctx, ""), time.Now()
				cancel()
			}
			return last
		},
		desc: prometheus.NewDesc("nodewise_agent_cni_check_ok",
			"istio-cni's own health on this node: 1 when the check passed, 0 when it failed (config, kubeconfig, token, plugin), with the file it read. The plugin's version is compared only on /v1/cni?version=.",
			[]string{"check", "file"}, nil),
	}
}

func (c *cniCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *cniCollector) Collect(ch chan<- prometheus.Metric) {
	for _, k := range c.check().Checks {
		v := 0.0
		if k.OK {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, k.Check, k.File)
	}
}
