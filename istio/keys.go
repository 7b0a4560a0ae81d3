// Package istio holds the facts about Istio that both of nodewise's wings
// share: the label and annotation keys Istio owns, its default namespace, and
// (in subpackages) the proxy inventory and the version-skew policy.
package istio

// Keys Istio owns that nodewise reads or writes.
const (
	// LabelRev selects the revision or tag a namespace or pod is injected by.
	LabelRev = "istio.io/rev"
	// LabelTag marks a revision-tag webhook with its tag name.
	LabelTag = "istio.io/tag"
	// LabelInjection is the legacy namespace switch for the default revision;
	// the injector's selectors give it precedence over LabelRev.
	LabelInjection = "istio-injection"
	// LabelInject is the per-pod injection switch.
	LabelInject = "sidecar.istio.io/inject"
	// LabelDataplaneMode=ambient puts a namespace or pod in ambient mode.
	LabelDataplaneMode = "istio.io/dataplane-mode"
	// AnnotationSidecarStatus is written by the injector; its JSON carries "revision".
	AnnotationSidecarStatus = "sidecar.istio.io/status"
	// ProxyContainer is the injected sidecar's container name.
	ProxyContainer = "istio-proxy"
	// DefaultRevision is the revision name of an unrevisioned install, and
	// DefaultTag the tag that also takes over istio-injection=enabled namespaces.
	DefaultRevision = "default"
	DefaultTag      = "default"
	// DefaultNamespace is where istiod, ztunnel and istio-cni live by default.
	DefaultNamespace = "istio-system"
)
