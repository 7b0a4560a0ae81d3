package skew

import (
	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/istio/inventory"
)

// FromInventory turns an inventory into observations: each sidecar against
// its revision's istiod, each node's ztunnel and istio-cni against the istiod
// of the ztunnel's revision (the default tag's when unlabelled), each
// waypoint (its oldest pod) against its revision's istiod. Components whose
// version cannot be read are left out.
func FromInventory(inv inventory.Inventory) ([]Observation, error) {
	cp := map[string]Version{}
	for _, r := range inv.Revisions {
		if v, err := ParseVersion(r.Version); err == nil {
			cp[r.Name] = v
		}
	}
	lookup := func(rev string) (Version, bool) {
		v, ok := cp[inv.Resolve(rev)]
		return v, ok
	}
	var out []Observation
	for _, p := range inv.Pods {
		if p.Mode != inventory.ModeSidecar {
			continue
		}
		v, err := ParseVersion(p.Version)
		if err != nil {
			continue
		}
		c, ok := lookup(p.Revision)
		out = append(out, Observation{Component: Sidecar, Subject: p.Namespace + "/" + p.Name, Revision: p.Revision, Version: v, ControlPlane: c, HasControlPlane: ok})
	}
	for _, w := range inv.Waypoints {
		v, err := ParseVersion(w.Version)
		if err != nil {
			continue
		}
		c, ok := lookup(w.Revision)
		out = append(out, Observation{Component: Waypoint, Subject: w.Ref(), Revision: w.Revision, Version: v, ControlPlane: c, HasControlPlane: ok})
	}
	for _, n := range inv.Nodes {
		rev := n.ZtunnelRevision
		if rev == "" {
			rev = istio.DefaultRevision
		}
		c, ok := lookup(rev)
		for _, comp := range []struct {
			c   Component
			ver string
		}{{Ztunnel, n.Ztunnel}, {CNI, n.CNI}} {
			v, err := ParseVersion(comp.ver)
			if comp.ver == "" || err != nil {
				continue
			}
			out = append(out, Observation{Component: comp.c, Subject: n.Name, Revision: rev, Version: v, ControlPlane: c, HasControlPlane: ok})
		}
	}
	return out, nil
}

// OldestSidecar is the oldest readable sidecar proxy version in the inventory.
func OldestSidecar(inv inventory.Inventory) (Version, bool) {
	var oldest Version
	found := false
	for _, p := range inv.Pods {
		if p.Mode != inventory.ModeSidecar {
			continue
		}
		v, err := ParseVersion(p.Version)
		if err != nil {
			continue
		}
		if !found || v.Less(oldest) {
			oldest, found = v, true
		}
	}
	return oldest, found
}

// OldestProxy is the oldest readable Envoy proxy version in the inventory:
// sidecars and waypoints, which the same skew policy binds to their
// revision's istiod.
func OldestProxy(inv inventory.Inventory) (Version, bool) {
	oldest, found := OldestSidecar(inv)
	for _, w := range inv.Waypoints {
		if v, err := ParseVersion(w.Version); err == nil && (!found || v.Less(oldest)) {
			oldest, found = v, true
		}
	}
	return oldest, found
}
