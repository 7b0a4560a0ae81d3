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
)

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
