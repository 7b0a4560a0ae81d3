// Package precheck finds, before anything moves, what is known to break an
// Istio upgrade and can be decided from the API: revision tags and
// namespace labels that point at no istiod, a dry-run authorization policy
// that older ztunnels enforce, istiod's workload-discovery response near
// gRPC's message limit, sidecar drains left at Envoy's edge defaults, new
// images some target node failed to pull, and sidecar workloads whose
// connections outlive their proxies' drain with no maximum connection
// duration.
// Check is pure; Observe reads the cluster.
package precheck

import (
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/istio/skew"
)

// Severity says whether a finding stops an upgrade (Error: the controllers
// refuse to start) or is for a person to weigh (Warning).
type Severity string

const (
	Error   Severity = "Error"
	Warning Severity = "Warning"
)

// Checks, by name (a Finding's Check).
const (
	CheckTags          = "revision-tags"
	CheckNamespaceRev  = "namespace-revision"
	CheckDryRun        = "dry-run-policy"
	CheckDiscoverySize = "discovery-size"
	CheckDrain         = "sidecar-drain"
	CheckAnalyze       = "istioctl-analyze"
)

// Finding is one hazard.
type Finding struct {
	Check    string   `json:"check"`
	Severity Severity `json:"severity"`
	// Subject is the object the finding is about ("namespace shop").
	Subject string `json:"subject"`
	Message string `json:"message"`
}

// String is the finding's one line.
func (f Finding) String() string {
	return fmt.Sprintf("%s %s: %s: %s", f.Severity, f.Check, f.Subject, f.Message)
}

// Input is what the checks read.
type Input struct {
	Inventory inventory.Inventory
	// Pods are every pod (for the proxies' own proxy config and the
	// workload count); AuthorizationPolicies every security.istio.io one.
	Pods                  []corev1.Pod
	AuthorizationPolicies []unstructured.Unstructured
	// MeshConfigs are the istiod ConfigMaps (istio, istio-<rev>) by name.
	MeshConfigs map[string]*corev1.ConfigMap
	// Nodes are every node (for the images each already has); Pulls the
	// images the upgrade needs on its target nodes.
	Nodes []corev1.Node
	Pulls []Pull
	// Connections are the node agents' counts of each pod's open
	// connections by age; DestinationRules every networking.istio.io one;
	// RootNamespace is Istio's (default istio-system), where a rule applies
	// mesh-wide.
	Connections      []PodConnections
	DestinationRules []unstructured.Unstructured
	RootNamespace    string
	// To is the version the upgrade goes to (zero: none named; the
	// version checks then take the newest installed revision).
	To skew.Version
}

const (
	// DiscoveryLimit is gRPC's default maximum message size, which a
	// ztunnel's workload-discovery response must fit.
	DiscoveryLimit = 4 << 20
	// BytesPerWorkload estimates one workload's share of that response:
	// the limit is reached at about 40,000 workloads.
	BytesPerWorkload = DiscoveryLimit / 40000
	// dryRunAnnotation puts an authorization policy in dry-run.
	dryRunAnnotation = "istio.io/dry-run"
)

// DryRunZtunnel is the first ztunnel release that honours dry-run
// authorization policies (older ones enforce them).
var DryRunZtunnel = skew.Version{Major: 1, Minor: 29, Patch: -1}

// Envoy's edge defaults for a listener drain and the parent's shutdown,
// which a sidecar's restart then waits out.
const (
	envoyDrain          = 600 * time.Second
	envoyParentShutdown = 900 * time.Second
)

// Check runs every check. Findings are sorted errors first.
func Check(in Input) []Finding {
	var out []Finding
	out = append(out, tags(in.Inventory)...)
	out = append(out, namespaceRevisions(in.Inventory)...)
	out = append(out, dryRun(in)...)
	out = append(out, discoverySize(in.Pods)...)
	out = append(out, drains(in)...)
	out = append(out, images(in)...)
	out = append(out, lifetimes(in)...)
	Sort(out)
	return out
}

// Sort orders findings errors first, then by check and subject.
func Sort(fs []Finding) {
	sort.SliceStable(fs, func(i, j int) bool {
		a, b := fs[i], fs[j]
		if a.Severity != b.Severity {
			return a.Severity == Error
		}
		if a.Check != b.Check {
			return a.Check < b.Check
		}
		return a.Subject < b.Subject
	})
}

// Errors are the findings that stop an upgrade.
func Errors(fs []Finding) []Finding {
	var out []Finding
	for _, f := range fs {
		if f.Severity == Error {
			out = append(out, f)
		}
	}
	return out
}

// Headline is the one line that refuses an upgrade on errs (Errors of a
// Check): their count, then one finding a clause.
func Headline(errs []Finding) string {
	lines := make([]string, len(errs))
	for i, f := range errs {
		lines[i] = f.String()
	}
	return fmt.Sprintf("precheck found %d error%s (nodewise precheck shows them): %s", len(errs), plural(len(errs)), strings.Join(lines, "; "))
}

func installed(inv inventory.Inventory) map[string]bool {
	revs := map[string]bool{}
	for _, r := range inv.Revisions {
		revs[r.Name] = true
	}
	return revs
}

// tags: a revision tag whose revision has no istiod serves nothing, so the
// namespaces on it get no injection (or a failing webhook).
func tags(inv inventory.Inventory) []Finding {
	revs := installed(inv)
	var out []Finding
	for tag, rev := range inv.Tags {
		if !revs[rev] {
			out = append(out, Finding{Check: CheckTags, Severity: Error, Subject: "tag " + tag,
				Message: fmt.Sprintf("points at revision %s, which no istiod serves (installed: %s): move the tag (nodewise tag set %s --revision REV --overwrite) or install the revision", rev, names(revs), tag)})
		}
	}
	return out
}

// namespaceRevisions: a namespace whose istio.io/rev names neither a tag
// nor an installed revision gets no sidecar on its next restart.
func namespaceRevisions(inv inventory.Inventory) []Finding {
	revs := installed(inv)
	var out []Finding
	for _, ns := range inv.Namespaces {
		if ns.Rev == "" || ns.Injection == "enabled" {
			continue
		}
		if _, tag := inv.Tags[ns.Rev]; tag || revs[ns.Rev] {
			continue
		}
		out = append(out, Finding{Check: CheckNamespaceRev, Severity: Error, Subject: "namespace " + ns.Name,
			Message: fmt.Sprintf("%s=%s names no tag and no installed revision (installed: %s): its pods lose their sidecar on their next restart", istio.LabelRev, ns.Rev, names(revs))})
	}
	return out
}

// dryRun: an authorization policy in dry-run is enforced by a ztunnel
// older than DryRunZtunnel, so traffic it would only log is denied on
// those nodes once an istiod that sends it to them runs.
func dryRun(in Input) []Finding {
	if newest(in).Less(DryRunZtunnel) {
		return nil // no istiod that sends dry-run policies to ztunnel
	}
	var old []string
	for _, n := range in.Inventory.Nodes {
		if v, err := skew.ParseVersion(n.Ztunnel); err == nil && v.Less(DryRunZtunnel) {
			old = append(old, n.Name)
		}
	}
	if len(old) == 0 {
		return nil
	}
	var out []Finding
	for _, p := range in.AuthorizationPolicies {
		if p.GetAnnotations()[dryRunAnnotation] != "true" {
			continue
		}
		out = append(out, Finding{Check: CheckDryRun, Severity: Error, Subject: fmt.Sprintf("AuthorizationPolicy %s/%s", p.GetNamespace(), p.GetName()),
			Message: fmt.Sprintf("is dry-run (%s=true), but ztunnel older than %s enforces it on %d node%s (%s): roll ztunnel to %s first, or take the policy out of dry-run deliberately", dryRunAnnotation, DryRunZtunnel.MinorString(), len(old), plural(len(old)), first(old, 3), DryRunZtunnel.MinorString())})
	}
	return out
}

// newest is the upgrade's target, else the newest installed revision's
// version.
func newest(in Input) skew.Version {
	best := in.To
	for _, r := range in.Inventory.Revisions {
		if v, err := skew.ParseVersion(r.Version); err == nil && best.Less(v) {
			best = v
		}
	}
	return best
}

// discoverySize estimates istiod's workload-discovery response (every pod
// with its own address) against gRPC's limit: past it, every restarted
// ztunnel fails to load its configuration and retries for ever.
func discoverySize(pods []corev1.Pod) []Finding {
	n := 0
	for i := range pods {
		p := &pods[i]
		if !p.Spec.HostNetwork && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			n++
		}
	}
	est := n * BytesPerWorkload
	sev := Severity("")
	switch {
	case est >= DiscoveryLimit:
		sev = Error
	case est >= DiscoveryLimit*3/4:
		sev = Warning
	default:
		return nil
	}
	return []Finding{{Check: CheckDiscoverySize, Severity: sev, Subject: "cluster",
		Message: fmt.Sprintf("%d workloads make a workload-discovery response of about %.1f MiB against gRPC's %d MiB limit (about %d B a workload): a restarted ztunnel may fail to load it; scope discovery (discoverySelectors) before restarting ztunnels", n, float64(est)/(1<<20), DiscoveryLimit>>20, BytesPerWorkload)}}
}

// proxyConfig is the part of Istio's ProxyConfig the drain check reads.
type proxyConfig struct {
	DrainDuration          string `json:"drainDuration"`
	ParentShutdownDuration string `json:"parentShutdownDuration"`
}

// drains: a sidecar whose drain is left at Envoy's edge defaults holds a
// restart (and so every wave) for up to 15 minutes, per mesh config or per
// pod annotation.
func drains(in Input) []Finding {
	var out []Finding
	edge := func(pc proxyConfig) bool {
		d, _ := time.ParseDuration(pc.DrainDuration)
		ps, _ := time.ParseDuration(pc.ParentShutdownDuration)
		return d >= envoyDrain || ps >= envoyParentShutdown
	}
	msg := fmt.Sprintf("sidecar drain at Envoy's edge defaults (drainDuration %s, parentShutdownDuration %s): each restart waits them out; set Istio's (45s, 60s) or what the workload needs", envoyDrain, envoyParentShutdown)
	names := make([]string, 0, len(in.MeshConfigs))
	for name := range in.MeshConfigs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		var mesh struct {
			DefaultConfig proxyConfig `json:"defaultConfig"`
		}
		if err := yaml.Unmarshal([]byte(in.MeshConfigs[name].Data["mesh"]), &mesh); err == nil && edge(mesh.DefaultConfig) {
			out = append(out, Finding{Check: CheckDrain, Severity: Warning, Subject: "mesh config " + name, Message: msg})
		}
	}
	byNS := map[string]int{}
	for i := range in.Pods {
		raw := in.Pods[i].Annotations["proxy.istio.io/config"]
		var pc proxyConfig
		if raw != "" && yaml.Unmarshal([]byte(raw), &pc) == nil && edge(pc) && inventory.HasSidecar(&in.Pods[i]) {
			byNS[in.Pods[i].Namespace]++
		}
	}
	for ns, n := range byNS {
		out = append(out, Finding{Check: CheckDrain, Severity: Warning, Subject: "namespace " + ns, Message: fmt.Sprintf("%d pod%s' %s", n, plural(n), msg)})
	}
	return out
}

func names(set map[string]bool) string {
	var out []string
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

func first(s []string, n int) string {
	sort.Strings(s)
	if len(s) <= n {
		return strings.Join(s, ", ")
	}
	return strings.Join(s[:n], ", ") + fmt.Sprintf(" and %d more", len(s)-n)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
