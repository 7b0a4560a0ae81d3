package skew

import (
	"fmt"

	"github.com/nodewise/nodewise/istio/inventory"
)

// WaypointCanaryMin is the first Istio release with weighted waypoint
// canaries: istiod programs the canary waypoint for a user labelled
// istio.io/use-waypoint-canary, and ztunnel picks the waypoint of each new
// connection by istio.io/use-waypoint-canary-weight.
var WaypointCanaryMin = Version{Major: 1, Minor: 31, Patch: -1}

// WaypointCanary reports whether a waypoint can move to a revision of
// version to by a weighted canary, and why (or why not) in one clause. Both
// halves must support it: the istiod of the target revision, which builds
// the canary's configuration, and every ztunnel, which splits the
// connections (an older ztunnel ignores the weight and keeps every
// connection on the primary). A node whose ztunnel version cannot be read
// counts as too old: the check fails closed to the in-place relabel.
func WaypointCanary(inv inventory.Inventory, to Version) (bool, string) {
	if to.Less(WaypointCanaryMin) {
		return false, fmt.Sprintf("istiod %s predates weighted waypoint canaries (%s)", to, WaypointCanaryMin)
	}
	seen := 0
	for _, n := range inv.Nodes {
		if n.Ztunnel == "" {
			continue
		}
		seen++
		v, err := ParseVersion(n.Ztunnel)
		if err != nil || v.Less(WaypointCanaryMin) {
			return false, fmt.Sprintf("ztunnel on %s runs %q, before weighted waypoint canaries (%s)", n.Name, n.Ztunnel, WaypointCanaryMin)
		}
	}
	if seen == 0 {
		return false, "no ztunnel seen to split connections between waypoints"
	}
	return true, fmt.Sprintf("istiod %s and all %d ztunnels at %s or later", to, seen, WaypointCanaryMin)
}
