package remote

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
)

// ErrAddressRefused marks an external gate address whose host the
// AddressPolicy does not allow. No request is sent to it.
var ErrAddressRefused = errors.New("gate address not allowed")

// DefaultClusterDomain is the cluster DNS domain when none is configured.
const DefaultClusterDomain = "cluster.local"

// AddressPolicy says which hosts an external gate may query. Anyone who may
// write a NodeRollout or RevisionMigration chooses spec.gates.prometheus.address,
// and the orchestrator sends it requests (with its bearer token, if any) from
// inside the cluster; without a policy it would forward them anywhere, such
// as a cloud metadata endpoint or a pod's admin port.
//
// The zero value allows only the cluster's Services: a host
// <service>.<namespace>.svc or <service>.<namespace>.svc.<ClusterDomain>
// (or a headless Service's pod, <pod>.<service>.<namespace>.svc). A short
// name such as prometheus.monitoring is refused: when the cluster has no
// such Service, the resolver's search list falls through to public DNS.
// Allow adds hosts outside the cluster.
type AddressPolicy struct {
	// ClusterDomain is the cluster's DNS domain (default cluster.local).
	ClusterDomain string
	// Allow are more host patterns (see CheckHostPattern): a host name or
	// IP address matched exactly, or *.<domain> for any host under domain.
	// The port is not part of the match.
	Allow []string
}

// CheckHostPattern says whether p is a valid AddressPolicy.Allow pattern: a
// host name or an IP address (no scheme, port or path), or *. followed by a
// domain of at least two labels.
func CheckHostPattern(p string) error {
	host := strings.TrimPrefix(p, "*.")
	switch {
	case p == "":
		return errors.New("empty host pattern")
	case strings.ContainsAny(p, "/:@ ?#[]") && net.ParseIP(p) == nil:
		return fmt.Errorf("host pattern %q: a host name or IP address only, such as prometheus.example.com or *.example.com (no scheme, port or path)", p)
	case strings.Contains(host, "*"):
		return fmt.Errorf("host pattern %q: * may only stand for the leading labels, as in *.example.com", p)
	case host != p && !strings.Contains(host, "."):
		return fmt.Errorf("host pattern %q: a wildcard needs a domain of at least two labels, such as *.example.com", p)
	case strings.HasPrefix(host, ".") || strings.HasSuffix(strings.TrimSuffix(host, "."), ".") || strings.Contains(host, ".."):
		return fmt.Errorf("host pattern %q: empty label", p)
	}
	return nil
}

// Validate checks the patterns and the cluster domain.
func (p AddressPolicy) Validate() error {
	if d := p.domain(); strings.ContainsAny(d, "/:*@ ") || strings.HasPrefix(d, ".") || strings.HasSuffix(d, ".") {
		return fmt.Errorf("cluster domain %q: must be a DNS domain such as cluster.local", p.ClusterDomain)
	}
	for _, a := range p.Allow {
		if err := CheckHostPattern(a); err != nil {
			return err
		}
	}
	return nil
}

func (p AddressPolicy) domain() string {
	if p.ClusterDomain == "" {
		return DefaultClusterDomain
	}
	return strings.ToLower(p.ClusterDomain)
}

// Check returns nil when u's host is allowed, else an error that wraps
// ErrAddressRefused and says what is allowed.
func (p AddressPolicy) Check(u *url.URL) error {
	host := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
	if host == "" {
		return fmt.Errorf("%w: no host", ErrAddressRefused)
	}
	if isServiceHost(host, p.domain()) {
		return nil
	}
	for _, a := range p.Allow {
		if matchHost(strings.TrimSuffix(strings.ToLower(a), "."), host) {
			return nil
		}
	}
	allowed := "no other host (the orchestrator's --gate-address-allow is empty)"
	if len(p.Allow) > 0 {
		allowed = "the hosts of --gate-address-allow: " + strings.Join(p.Allow, ", ")
	}
	return fmt.Errorf("%w: host %q is neither a cluster Service (<service>.<namespace>.svc or .svc.%s) nor one of %s",
		ErrAddressRefused, host, p.domain(), allowed)
}

// isServiceHost: [<pod>.]<service>.<namespace>.svc[.<domain>], the names
// cluster DNS answers for Services (and a headless Service's pods, such as
// prometheus-0.prometheus-operated.monitoring.svc) and nothing else resolves.
func isServiceHost(host, domain string) bool {
	rest, ok := strings.CutSuffix(host, ".svc."+domain)
	if !ok {
		if rest, ok = strings.CutSuffix(host, ".svc"); !ok {
			return false
		}
	}
	labels := strings.Split(rest, ".")
	for _, l := range labels {
		if l == "" {
			return false
		}
	}
	return len(labels) == 2 || len(labels) == 3
}

func matchHost(pattern, host string) bool {
	if suffix, ok := strings.CutPrefix(pattern, "*."); ok {
		return strings.HasSuffix(host, "."+suffix)
	}
	if ip := net.ParseIP(pattern); ip != nil {
		return ip.Equal(net.ParseIP(host))
	}
	return pattern == host
}
