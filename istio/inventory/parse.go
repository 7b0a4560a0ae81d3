package inventory

import (
	"encoding/json"
	"strings"

	"k8s.io/kubectl/pkg/util/podutils"

	corev1 "k8s.io/api/core/v1"

	"github.com/nodewise/nodewise/istio"
)

// Unknown is the version reported when an image is pinned by digest or untagged.
const Unknown = "unknown"

// ImageTag returns the tag of an image reference ("docker.io/istio/proxyv2:1.27.3"
// -> "1.27.3"), or Unknown for digests and untagged images.
func ImageTag(image string) string {
	if strings.Contains(image, "@") {
		return Unknown
	}
	slash := strings.LastIndex(image, "/")
	colon := strings.LastIndex(image, ":")
	if colon <= slash || colon == len(image)-1 {
		return Unknown
	}
	return image[colon+1:]
}

// HasSidecar says whether p carries an injected proxy: such a pod is the
// sidecar's, never ztunnel's, whatever its ambient labels say.
func HasSidecar(p *corev1.Pod) bool {
	_, ok := sidecarContainer(p)
	return ok
}

// sidecarContainer finds the injected proxy, as a regular container or as a
// native sidecar (an init container that keeps running).
func sidecarContainer(p *corev1.Pod) (corev1.Container, bool) {
	for _, c := range p.Spec.Containers {
		if c.Name == istio.ProxyContainer {
			return c, true
		}
	}
	for _, c := range p.Spec.InitContainers {
		if c.Name == istio.ProxyContainer {
			return c, true
		}
	}
	return corev1.Container{}, false
}

// statusRevision reads "revision" from the sidecar status annotation.
func statusRevision(p *corev1.Pod) string {
	raw := p.Annotations[istio.AnnotationSidecarStatus]
	if raw == "" {
		return ""
	}
	var st struct {
		Revision string `json:"revision"`
	}
	if err := json.Unmarshal([]byte(raw), &st); err != nil {
		return ""
	}
	return st.Revision
}

// ClassifyPod says which proxy serves p, given its namespace and the
// observed tags and nodes. ok is false for pods outside the mesh.
//
// A sidecar pod's revision comes from, in order: the injector's status
// annotation, the pod's istio.io/rev label, the namespace's label (a tag
// resolved to its revision), then "default". Its version is the istio-proxy
// image tag. An ambient pod (namespace or pod labelled
// istio.io/dataplane-mode=ambient, no sidecar) takes its node's ztunnel.
// A waypoint pod (istio.WaypointName) runs its own istio-proxy: its revision
// is the one istiod's waypoint template wrote (the pod's istio.io/rev
// annotation, else label), else its namespace's istio.io/rev, else
// "default", a tag resolved to its revision.
func ClassifyPod(p *corev1.Pod, ns Namespace, tags map[string]string, nodes map[string]Node) (Pod, bool) {
	out := Pod{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName, Ready: podutils.IsPodReady(p)}
	if gw := istio.WaypointName(p.Labels); gw != "" {
		out.Mode, out.Waypoint, out.Version = ModeWaypoint, gw, Unknown
		if c, ok := sidecarContainer(p); ok {
			out.Version = ImageTag(c.Image)
		} else if len(p.Spec.Containers) > 0 {
			out.Version = ImageTag(p.Spec.Containers[0].Image)
		}
		for _, rev := range []string{p.Annotations[istio.LabelRev], p.Labels[istio.LabelRev], ns.Rev, istio.DefaultRevision} {
			if rev != "" {
				out.Revision = resolve(rev, tags)
				break
			}
		}
		return out, true
	}
	if c, ok := sidecarContainer(p); ok {
		out.Mode = ModeSidecar
		out.Version = ImageTag(c.Image)
		out.Revision = statusRevision(p)
		if out.Revision == "" {
			out.Revision = resolve(p.Labels[istio.LabelRev], tags)
		}
		if out.Revision == "" {
			out.Revision = ns.Revision
		}
		if out.Revision == "" {
			out.Revision = istio.DefaultRevision
		}
		return out, true
	}
	mode := p.Labels[istio.LabelDataplaneMode]
	if mode == "" && ns.Mode == ModeAmbient {
		mode = string(ModeAmbient)
	}
	if mode != string(ModeAmbient) {
		return Pod{}, false
	}
	out.Mode = ModeAmbient
	out.Version = Unknown
	if n, ok := nodes[p.Spec.NodeName]; ok && n.Ztunnel != "" {
		out.Version = n.Ztunnel
		out.Revision = n.ZtunnelRevision
	}
	if out.Revision == "" {
		out.Revision = istio.DefaultRevision
	}
	return out, true
}

// ClassifyNamespace reads a namespace's mesh labels the way the injector's
// selectors do: istio-injection=enabled means the default tag whatever
// istio.io/rev says, and any other istio-injection value turns injection off.
func ClassifyNamespace(ns *corev1.Namespace, tags map[string]string) Namespace {
	out := Namespace{Name: ns.Name, Rev: ns.Labels[istio.LabelRev], Injection: ns.Labels[istio.LabelInjection]}
	switch {
	case ns.Labels[istio.LabelDataplaneMode] == string(ModeAmbient):
		out.Mode = ModeAmbient
	case out.Injection == "enabled":
		out.Mode = ModeSidecar
		out.Revision = resolve(istio.DefaultTag, tags)
		out.Implicit = istio.LabelInjection + "=enabled"
	case out.Injection != "":
		// Opted out: not injected, whatever istio.io/rev says.
	case out.Rev != "":
		out.Mode = ModeSidecar
		out.Revision = resolve(out.Rev, tags)
	}
	return out
}

func resolve(revOrTag string, tags map[string]string) string {
	if rev, ok := tags[revOrTag]; ok {
		return rev
	}
	return revOrTag
}

// older says whether image tag a is an older release than b, comparing
// their leading numbers ("1.27.3-distroless" < "1.28.0"). An unreadable tag
// is older than nothing and newer than nothing.
func older(a, b string) bool {
	num := func(s string) []int {
		var out []int
		for _, part := range strings.SplitN(strings.TrimPrefix(s, "v"), ".", 3) {
			n, i := 0, 0
			for ; i < len(part) && part[i] >= '0' && part[i] <= '9'; i++ {
				n = n*10 + int(part[i]-'0')
			}
			if i == 0 {
				return nil
			}
			out = append(out, n)
		}
		return out
	}
	x, y := num(a), num(b)
	if x == nil || y == nil {
		return false
	}
	for i := 0; i < len(x) && i < len(y); i++ {
		if x[i] != y[i] {
			return x[i] < y[i]
		}
	}
	return len(x) < len(y)
}
