package precheck

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// CheckImages names the finding of a new image that a target node could
// not pull.
const CheckImages = "image-pull"

// Pull is the images an upgrade step needs on its target nodes: a
// NodeRollout's target DaemonSet's new template on the nodes it selects.
type Pull struct {
	// For names what needs the images ("NodeRollout r, istio-system/ztunnel").
	For    string
	Images []string
	Nodes  []string
}

// perNode is how many nodes that cannot pull one image get a finding each;
// past it they share one line.
const perNode = 3

// pullFailures are the container waiting reasons of an image that could not
// be pulled (the kubelet's images package).
var pullFailures = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true,
	"ErrImageNeverPull": true, "RegistryUnavailable": true, "SignatureValidationFailed": true,
}

// images: a new image that a target node already failed to pull (a
// pre-pull pod's, or any pod's, container waiting on ErrImagePull and its
// kin) stops that node's swap half way, so it is an error, per node. A node
// that lists the image among its own (node.status.images) has it, whatever
// an older pod says. A node that neither has it nor tried is not judged:
// nothing the API shows says it cannot (spec.prepull tries before each
// node's swap).
func images(in Input) []Finding {
	if len(in.Pulls) == 0 {
		return nil
	}
	has := map[string]map[string]bool{} // node -> image
	for i := range in.Nodes {
		n := &in.Nodes[i]
		set := map[string]bool{}
		for _, img := range n.Status.Images {
			for _, name := range img.Names {
				set[normalImage(name)] = true
			}
		}
		has[n.Name] = set
	}
	failed := map[string]map[string]string{} // node -> image -> why
	for i := range in.Pods {
		p := &in.Pods[i]
		if p.Spec.NodeName == "" {
			continue
		}
		for _, cs := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			w := cs.State.Waiting
			if w == nil || !pullFailures[w.Reason] {
				continue
			}
			if failed[p.Spec.NodeName] == nil {
				failed[p.Spec.NodeName] = map[string]string{}
			}
			why := w.Reason
			if w.Message != "" {
				why += ": " + w.Message
			}
			failed[p.Spec.NodeName][normalImage(cs.Image)] = fmt.Sprintf("%s (pod %s/%s)", why, p.Namespace, p.Name)
		}
	}
	var out []Finding
	for _, pull := range in.Pulls {
		for _, img := range pull.Images {
			key := normalImage(img)
			var nodes []string
			for _, n := range pull.Nodes {
				if _, ok := failed[n][key]; ok && !has[n][key] {
					nodes = append(nodes, n)
				}
			}
			sort.Strings(nodes)
			fix := "make it pullable there (registry, ImagePullSecrets, the tag) before the rollout starts"
			if len(nodes) <= perNode {
				for _, n := range nodes {
					out = append(out, Finding{Check: CheckImages, Severity: Error, Subject: "node " + n,
						Message: fmt.Sprintf("cannot pull %s, which %s needs: %s; %s", img, pull.For, failed[n][key], fix)})
				}
				continue
			}
			out = append(out, Finding{Check: CheckImages, Severity: Error, Subject: fmt.Sprintf("%d nodes", len(nodes)),
				Message: fmt.Sprintf("cannot pull %s, which %s needs (%s): on %s %s; %s", img, pull.For, first(append([]string(nil), nodes...), perNode), nodes[0], failed[nodes[0]][key], fix)})
		}
	}
	return out
}

// normalImage is an image reference as the kubelet reports it: Docker Hub's
// short names in full ("istio/ztunnel:1.29.0" is
// "docker.io/istio/ztunnel:1.29.0"), so a pod's and a node's spelling meet.
func normalImage(ref string) string {
	name := ref
	if i := strings.IndexByte(ref, '/'); i < 0 {
		name = "docker.io/library/" + ref
	} else if host := ref[:i]; !strings.ContainsAny(host, ".:") && host != "localhost" {
		name = "docker.io/" + ref
	}
	return name
}
