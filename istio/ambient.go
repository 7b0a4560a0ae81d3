package istio

// Keys that say whether a pod is in the ambient mesh.
const (
	// DataplaneModeAmbient and DataplaneModeNone are LabelDataplaneMode's
	// values: ambient enrols a namespace or pod, none opts a pod out.
	DataplaneModeAmbient = "ambient"
	DataplaneModeNone    = "none"
	// LabelGatewayManaged=istio.io-mesh-controller marks a waypoint pod.
	LabelGatewayManaged = "gateway.istio.io/managed"
	// GatewayManagedWaypoint is LabelGatewayManaged's value on waypoints.
	GatewayManagedWaypoint = "istio.io-mesh-controller"
	// LabelGatewayName names the Gateway a gateway pod (a waypoint) runs.
	LabelGatewayName = "istio.io/gateway-name"
	// LabelK8sGatewayName names the Gateway on the Deployment, Service and
	// pods istiod creates for it (Gateway API's own key).
	LabelK8sGatewayName = "gateway.networking.k8s.io/gateway-name"
	// LabelUseWaypoint names the waypoint a namespace, service or pod uses.
	LabelUseWaypoint = "istio.io/use-waypoint"
	// LabelUseWaypointNamespace names the namespace of LabelUseWaypoint's
	// waypoint when it is not the user's own.
	LabelUseWaypointNamespace = "istio.io/use-waypoint-namespace"
	// LabelUseWaypointCanary and AnnotationUseWaypointCanaryWeight (Istio
	// 1.31 and later) name a second, canary waypoint and the percentage of
	// the user's in-mesh connections it takes (0-100, default 0).
	LabelUseWaypointCanary            = "istio.io/use-waypoint-canary"
	AnnotationUseWaypointCanaryWeight = "istio.io/use-waypoint-canary-weight"
	// LabelUseWaypointCanaryNamespace names the canary's namespace when it
	// is not the user's own.
	LabelUseWaypointCanaryNamespace = "istio.io/use-waypoint-canary-namespace"
	// WaypointGatewayClass is the GatewayClass of Istio's Envoy waypoints.
	WaypointGatewayClass = "istio-waypoint"
)

// WaypointRevision is the revision istiod serves a waypoint Gateway from:
// its istio.io/rev label, else its namespace's, else the default tag; a tag
// resolves to its revision through tags (tag → revision).
func WaypointRevision(gwLabels, nsLabels, tags map[string]string) string {
	sel := gwLabels[LabelRev]
	if sel == "" {
		sel = nsLabels[LabelRev]
	}
	if sel == "" {
		sel = DefaultTag
	}
	if rev, ok := tags[sel]; ok {
		return rev
	}
	return sel
}

// WaypointName is the Gateway a waypoint pod runs, or "" for any other pod.
func WaypointName(podLabels map[string]string) string {
	if podLabels[LabelGatewayManaged] != GatewayManagedWaypoint {
		return ""
	}
	if n := podLabels[LabelK8sGatewayName]; n != "" {
		return n
	}
	return podLabels[LabelGatewayName]
}

// Ambient says whether Istio puts a pod in the ambient mesh, from its
// namespace's labels and its own, and why not when it does not: the pod's
// LabelDataplaneMode wins over its namespace's (none opts a pod of an ambient
// namespace out, ambient enrols a pod of another namespace), and waypoints
// are never captured (they are ztunnel's peers, not its workloads). A pod
// with an injected sidecar is the sidecar's: callers that know the pod's
// containers leave those out too.
func Ambient(nsLabels, podLabels map[string]string) (bool, string) {
	if podLabels[LabelGatewayManaged] == GatewayManagedWaypoint || podLabels[LabelGatewayName] != "" {
		return false, "a waypoint"
	}
	switch podLabels[LabelDataplaneMode] {
	case DataplaneModeNone:
		return false, "opted out (" + LabelDataplaneMode + "=" + DataplaneModeNone + ")"
	case DataplaneModeAmbient:
		return true, ""
	}
	if nsLabels[LabelDataplaneMode] == DataplaneModeAmbient {
		return true, ""
	}
	return false, "not labelled " + LabelDataplaneMode + "=" + DataplaneModeAmbient
}
