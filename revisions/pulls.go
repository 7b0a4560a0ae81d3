package revisions

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/istio/precheck"
)

// Pulls are the images a migration named name of spec needs on the nodes
// it touches, for precheck's image check: To's sidecar proxy image on
// every node that runs a pod of a namespace it restarts (of a waypoint it
// moves, for waypoints: Only), and To's istiod image on the nodes its pods
// run on. To's proxy image is what its sidecars already run, else what
// Istio's charts compose by default: istiod's image with proxyv2 for its
// name (one hub, one tag). o is the objects inv was built from. It is pure.
func Pulls(name string, spec v1alpha1.RevisionMigrationSpec, inv inventory.Inventory, o inventory.Objects, istioNamespace string) []precheck.Pull {
	spec = Defaulted(spec)
	to := inv.Resolve(spec.To)
	byNS := map[string][]corev1.Pod{}
	for _, p := range o.Pods {
		byNS[p.Namespace] = append(byNS[p.Namespace], p)
	}
	istiodImage, istiodNodes := istiodOf(o, istioNamespace, to, byNS[istioNamespace])
	images := map[string]bool{}
	for _, p := range inv.Pods {
		if p.Mode == inventory.ModeSidecar && p.Revision == to {
			for _, img := range proxyImages(byNS[p.Namespace], p.Name) {
				images[img] = true
			}
		}
	}
	if tag := inventory.ImageTag(istiodImage); len(images) == 0 && strings.Contains(istiodImage, "/") && tag != inventory.Unknown {
		images[path.Dir(istiodImage)+"/proxyv2:"+tag] = true
	}
	var nodes []string
	proxy := "sidecar proxy"
	if spec.Waypoints == v1alpha1.WaypointsOnly {
		proxy = "waypoint proxy"
		for _, p := range inv.Pods {
			if p.Mode == inventory.ModeWaypoint && p.Revision == inv.Resolve(spec.From) && p.Node != "" {
				nodes = append(nodes, p.Node)
			}
		}
	} else {
		for _, m := range ScopeOf(spec, inv, o.Namespaces, byNS, istioNamespace).Members {
			for _, p := range byNS[m.Name] {
				if p.Spec.NodeName != "" {
					nodes = append(nodes, p.Spec.NodeName)
				}
			}
		}
	}
	var out []precheck.Pull
	if len(images) > 0 && len(nodes) > 0 {
		out = append(out, precheck.Pull{For: fmt.Sprintf("RevisionMigration %s's revision %s (its %s)", name, to, proxy), Images: slices.Sorted(maps.Keys(images)), Nodes: unique(nodes)})
	}
	if istiodImage != "" && len(istiodNodes) > 0 {
		out = append(out, precheck.Pull{For: fmt.Sprintf("RevisionMigration %s's revision %s (its istiod)", name, to), Images: []string{istiodImage}, Nodes: unique(istiodNodes)})
	}
	return out
}

// istiodOf is revision rev's istiod image (its Deployment's discovery
// container, as Istio's chart names it) and the nodes its pods (among pods,
// the Istio namespace's) are bound to.
func istiodOf(o inventory.Objects, istioNamespace, rev string, pods []corev1.Pod) (string, []string) {
	for _, d := range o.Deployments {
		r := d.Labels[istio.LabelRev]
		if r == "" {
			r = istio.DefaultRevision
		}
		image := ""
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Name == "discovery" {
				image = c.Image
			}
		}
		if d.Namespace != istioNamespace || r != rev || image == "" {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		var nodes []string
		for i := range pods {
			if err == nil && !sel.Empty() && sel.Matches(labels.Set(pods[i].Labels)) && pods[i].Spec.NodeName != "" {
				nodes = append(nodes, pods[i].Spec.NodeName)
			}
		}
		return image, nodes
	}
	return "", nil
}

// proxyImages is the istio-proxy image of the pod named name among pods.
func proxyImages(pods []corev1.Pod, name string) []string {
	for i := range pods {
		if pods[i].Name != name {
			continue
		}
		for _, c := range append(append([]corev1.Container(nil), pods[i].Spec.InitContainers...), pods[i].Spec.Containers...) {
			if c.Name == istio.ProxyContainer {
				return []string{c.Image}
			}
		}
	}
	return nil
}

func unique(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}
