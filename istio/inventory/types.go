package inventory

// Mode is how a pod joins the mesh.
type Mode string

const (
	ModeSidecar Mode = "sidecar"
	ModeAmbient Mode = "ambient"
	// ModeWaypoint is a waypoint's own Envoy pod: the L7 proxy istiod runs
	// for a Gateway of class istio-waypoint, on the Gateway's revision.
	ModeWaypoint Mode = "waypoint"
)

// Pod is one meshed pod and the proxy that serves it.
type Pod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Node      string `json:"node,omitempty"`
	Mode      Mode   `json:"mode"`
	// Revision is the istiod revision the proxy was injected by (sidecar) or
	// the ztunnel's revision on the pod's node (ambient).
	Revision string `json:"revision"`
	// Version is the proxy's version: the istio-proxy image tag (sidecar) or the
	// node's ztunnel version (ambient). "unknown" when it cannot be read.
	Version string `json:"version"`
	Ready   bool   `json:"ready"`
	// Waypoint is the Gateway a waypoint pod runs (ModeWaypoint only).
	Waypoint string `json:"waypoint,omitempty"`
}

// Waypoint is one waypoint (a Gateway of class istio-waypoint) as its pods
// run it. A waypoint whose Deployment has no pod is not seen.
type Waypoint struct {
	Namespace string `json:"namespace"`
	// Name is the Gateway's name.
	Name string `json:"name"`
	// Revision and Version are its oldest pod's: the revision that must
	// stay installed while the waypoint runs it.
	Revision string `json:"revision"`
	Version  string `json:"version"`
	Pods     int    `json:"pods"`
	Ready    int    `json:"ready"`
	// Rolling: its pods run more than one revision or version.
	Rolling bool `json:"rolling,omitempty"`
}

// Ref is "namespace/name".
func (w Waypoint) Ref() string { return w.Namespace + "/" + w.Name }

// Node is the shared ambient data plane on one node.
type Node struct {
	Name            string `json:"name"`
	Ztunnel         string `json:"ztunnel,omitempty"`
	ZtunnelRevision string `json:"ztunnelRevision,omitempty"`
	CNI             string `json:"cni,omitempty"`
}

// Revision is an installed istiod revision.
type Revision struct {
	Name    string   `json:"name"`
	Version string   `json:"version"`
	Ready   bool     `json:"ready"`
	Tags    []string `json:"tags,omitempty"`
}

// Namespace is a namespace's mesh membership as its labels declare it.
type Namespace struct {
	Name string `json:"name"`
	Mode Mode   `json:"mode,omitempty"`
	// Rev is the namespace's istio.io/rev label (a revision or a tag).
	Rev string `json:"rev,omitempty"`
	// Revision is Rev resolved through the tags.
	Revision string `json:"revision,omitempty"`
	// Injection is the namespace's istio-injection label.
	Injection string `json:"injection,omitempty"`
	// Implicit says how a namespace uses a revision without naming it:
	// "istio-injection=enabled" (which takes precedence over istio.io/rev in
	// the injector's selectors), or "unlabelled" for a namespace with no
	// injection label whose pods run sidecars (the default tag's, per pod or
	// with namespaces injected by default). Empty for istio.io/rev namespaces.
	Implicit string `json:"implicit,omitempty"`
}

// Inventory is one observation of the whole data plane.
type Inventory struct {
	Revisions  []Revision        `json:"revisions"`
	Tags       map[string]string `json:"tags"`
	Nodes      []Node            `json:"nodes"`
	Namespaces []Namespace       `json:"namespaces"`
	Pods       []Pod             `json:"pods"`
	// Waypoints are the waypoints of Pods (ModeWaypoint), one entry each.
	Waypoints []Waypoint `json:"waypoints,omitempty"`
}

// RevisionVersion returns the istiod version serving a revision or tag.
func (inv Inventory) RevisionVersion(revOrTag string) (string, bool) {
	name := inv.Resolve(revOrTag)
	for _, r := range inv.Revisions {
		if r.Name == name {
			return r.Version, true
		}
	}
	return "", false
}

// Resolve maps a tag to its revision; anything else is returned as is.
func (inv Inventory) Resolve(revOrTag string) string {
	if rev, ok := inv.Tags[revOrTag]; ok {
		return rev
	}
	return revOrTag
}

// Key is the label set of nodewise_proxy_pods.
type Key struct {
	Namespace, Revision, Version string
	Mode                         Mode
}

// Counts is the pod count per Key: the value of nodewise_proxy_pods.
func (inv Inventory) Counts() map[Key]int {
	out := map[Key]int{}
	for _, p := range inv.Pods {
		out[Key{Namespace: p.Namespace, Revision: p.Revision, Version: p.Version, Mode: p.Mode}]++
	}
	return out
}
