package inventory

// Istio's label and annotation keys that inventory reads (Istio owns them).
const (
	// LabelRev selects the revision or tag a namespace or pod is injected by.
	LabelRev = "istio.io/rev"
	// LabelTag marks a revision-tag webhook with its tag name.
	LabelTag = "istio.io/tag"
	// LabelInjection is the legacy namespace switch for the default revision.
	LabelInjection = "istio-injection"
	// LabelDataplaneMode=ambient puts a namespace or pod in ambient mode.
	LabelDataplaneMode = "istio.io/dataplane-mode"
	// AnnotationSidecarStatus is written by the injector; its JSON carries "revision".
	AnnotationSidecarStatus = "sidecar.istio.io/status"
	// ProxyContainer is the injected sidecar's container name.
	ProxyContainer = "istio-proxy"
	// DefaultRevision is the revision name of an unrevisioned install.
	DefaultRevision = "default"
)
