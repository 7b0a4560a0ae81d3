package dataplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/zap"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/nodewise/nodewise/sim/cluster"
)

// TagBadToken ends the image tag of an istio-cni build whose kubeconfig
// holds a token the API server refuses (istio-cni that lost its own
// credentials: new pods would no longer be enrolled).
const TagBadToken = "-badtoken"

// TagNoReadd ends the image tag of an istio-cni build that, when it starts
// on a node (after its swap), drops one ambient pod's redirection in its
// pass over the node's pods and never puts it back (istio-cni that no
// longer re-adds a pod: its traffic leaves ztunnel out, and nothing fails).
const TagNoReadd = "-noreadd"

// TagBypass ends the image tag of an istio-cni build that, when it starts
// on a node (after its swap), re-adds one ambient pod with its outbound
// capture unhooked: every redirect rule is in the pod's namespace, but no
// hook reaches the chain that sends outbound connections to ztunnel, so the
// pod's new connections go straight to their peers (istio-cni whose re-add
// writes the chains and not the hook: the rules look right, the traffic
// leaves ztunnel out, and nothing fails).
const TagBypass = "-bypass"

// TagNoAdd ends the image tag of an istio-cni build that enrols no new
// pod: an ambient pod started on its node after it gets no redirection
// (istio-cni that no longer enrols; the pods it found keep theirs).
const TagNoAdd = "-noadd"

// cniAddsNone says the node's istio-cni stand-in is a -noadd build.
func (d *DataPlane) cniAddsNone(node string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return strings.HasSuffix(d.cniTag[node], TagNoAdd)
}

// The files the istio-cni stand-in writes in each node's CNI dirs, as
// Istio's install-cni does on a real node (cni/pkg/install): its plugin
// chained into the node's primary conflist, its kubeconfig beside it, and
// the plugin binary.
const (
	cniPrimaryConf = "10-sim-ptp.conflist" // the node's primary network: the "ptp" plugin
	cniKubeconfig  = "ZZZ-istio-cni-kubeconfig"
	cniPlugin      = "istio-cni"
)

// CNIDirs are a simulated node's CNI conf and bin dirs, which its node
// agent reads (nodeagent.Config.CNIConfDir, CNIBinDir). The conf dir holds
// the node's primary conflist from the start; istio-cni's stand-in adds
// its own files when its pod starts.
func (d *DataPlane) CNIDirs(node string) (conf, bin string, err error) {
	conf, bin = filepath.Join(d.cniRoot, node, "net.d"), filepath.Join(d.cniRoot, node, "bin")
	for _, dir := range []string{conf, bin} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", "", err
		}
	}
	primary := filepath.Join(conf, cniPrimaryConf)
	if _, err := os.Stat(primary); errors.Is(err, os.ErrNotExist) {
		err = writeConflist(primary, nil)
		if err != nil {
			return "", "", err
		}
	}
	return conf, bin, nil
}

// conflist is the part of a CNI network config list the stand-in writes.
type conflist struct {
	CNIVersion string           `json:"cniVersion"`
	Name       string           `json:"name"`
	Plugins    []map[string]any `json:"plugins"`
}

// writeConflist writes the node's primary conflist: ptp, then extra.
func writeConflist(path string, extra map[string]any) error {
	l := conflist{CNIVersion: "1.0.0", Name: "sim-pod-network", Plugins: []map[string]any{
		{"type": "ptp", "ipam": map[string]any{"type": "host-local"}},
	}}
	if extra != nil {
		l.Plugins = append(l.Plugins, extra)
	}
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(path, b, 0o644)
}

// installCNI is what the istio-cni stand-in does when its pod starts, as
// install-cni does: chain the plugin into the primary conflist, write its
// kubeconfig with a token of its ServiceAccount bound to its pod, and copy
// its plugin binary, of its image's version. A build tagged -badtoken
// writes a token whose signature is not the API server's.
func (d *DataPlane) installCNI(ctx context.Context, pod *corev1.Pod) error {
	d.mu.Lock()
	client, api := d.client, d.api
	d.mu.Unlock()
	if client == nil || api == nil {
		return errors.New("istio-cni stand-in: the data plane has no API server yet (UseCluster)")
	}
	conf, bin, err := d.CNIDirs(pod.Spec.NodeName)
	if err != nil {
		return err
	}
	tag := imageTag(pod)
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tr, err := client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("istio-cni stand-in: a token for ServiceAccount %s/%s: %w", pod.Namespace, sa, err)
	}
	token := tr.Status.Token
	if strings.HasSuffix(tag, TagBadToken) {
		token = forgeSignature(token)
	}
	if err := writeCNIKubeconfig(filepath.Join(conf, cniKubeconfig), api, token); err != nil {
		return err
	}
	// The plugin prints its version when run with no CNI_COMMAND, as the
	// CNI library's skel does for istio-cni ("CNI plugin istio-cni <version>").
	version := strings.TrimSuffix(strings.TrimSuffix(tag, "-distroless"), "-debug")
	script := fmt.Sprintf("#!/bin/sh\n# istio-cni stand-in of the live data plane (pod %s/%s)\necho 'CNI plugin istio-cni %s' >&2\n", pod.Namespace, pod.Name, version)
	if err := writeAtomic(filepath.Join(bin, cniPlugin), []byte(script), 0o755); err != nil {
		return err
	}
	return writeConflist(filepath.Join(conf, cniPrimaryConf), map[string]any{
		"type": "istio-cni", "name": "istio-cni", "ambient_enabled": true,
		"kubernetes": map[string]any{"kubeconfig": filepath.Join(conf, cniKubeconfig), "cni_bin_dir": bin},
	})
}

// readdPods is the istio-cni stand-in's pass over the node's ambient pods
// when it starts. Istio's istio-cni reconciles them on a restart, and their
// in-pod rules stay in place across it, so a healthy build changes nothing.
// A -noreadd build deletes the redirect rules of the node's first ambient
// app pod (by namespace/name) and does not reinstall them; a -bypass build
// unhooks that pod's outbound capture. It returns that pod ("" when the
// node has none, or the build is healthy).
func (d *DataPlane) readdPods(node, tag string) (string, error) {
	fault, what := dropRedirect, "its redirection is gone"
	switch {
	case strings.HasSuffix(tag, TagNoReadd):
	case strings.HasSuffix(tag, TagBypass):
		fault, what = unhookOutbound, "its outbound capture is unhooked"
	default:
		return "", nil
	}
	d.mu.Lock()
	var first *podSandbox
	for uid := range d.byNode[node] {
		sb := d.pods[uid]
		if sb == nil || !sb.ambient || sb.probeCfg != nil || sb.stopping {
			continue
		}
		if first == nil || sb.key < first.key {
			first = sb
		}
	}
	d.mu.Unlock()
	if first == nil {
		return "", nil
	}
	if err := fault(first.netns); err != nil {
		return "", fmt.Errorf("istio-cni stand-in %s: re-adding %s: %w", tag, first.key, err)
	}
	d.log.Info("istio-cni stand-in: pod re-added wrong, "+what, zap.String("node", node), zap.String("pod", first.key), zap.String("tag", tag))
	return first.key, nil
}

// imageTag is the tag of a pod's first container's image ("" without one).
func imageTag(pod *corev1.Pod) string {
	if len(pod.Spec.Containers) == 0 {
		return ""
	}
	image := pod.Spec.Containers[0].Image
	if i := strings.LastIndex(image, ":"); i >= 0 && !strings.Contains(image[i:], "/") {
		return image[i+1:]
	}
	return ""
}

// forgeSignature replaces a JWT's signature with one the API server did
// not make: the token is well formed and names the same ServiceAccount,
// and is refused.
func forgeSignature(token string) string {
	i := strings.LastIndex(token, ".")
	if i < 0 {
		return token + "x"
	}
	sig := []byte(token[i+1:])
	for j := range sig {
		if sig[j] == 'A' {
			sig[j] = 'B'
		} else {
			sig[j] = 'A'
		}
	}
	return token[:i+1] + string(sig)
}

// writeCNIKubeconfig writes istio-cni's kubeconfig: the API server, its CA
// and the token, as install-cni's template does.
func writeCNIKubeconfig(path string, api *rest.Config, token string) error {
	ca := api.CAData
	if len(ca) == 0 && api.CAFile != "" {
		b, err := os.ReadFile(api.CAFile)
		if err != nil {
			return fmt.Errorf("istio-cni stand-in: reading the API server's CA: %w", err)
		}
		ca = b
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: api.Host, CertificateAuthorityData: ca}
	kc.AuthInfos["istio-cni"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["istio-cni-context"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "istio-cni"}
	kc.CurrentContext = "istio-cni-context"
	b, err := clientcmd.Write(*kc)
	if err != nil {
		return err
	}
	return writeAtomic(path, b, 0o600)
}

// writeAtomic replaces path with b (a reader, or the agent running the
// plugin, never sees a half-written file).
func writeAtomic(path string, b []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// UseCluster lets the data plane read the API (which namespaces are
// ambient) and gives istio-cni's stand-in the API server to write in its
// kubeconfig. Until it is called, app pods stay in ContainerCreating.
func (d *DataPlane) UseCluster(c *cluster.Cluster) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.client, d.api = c.Client, rest.CopyConfig(c.Config)
}
