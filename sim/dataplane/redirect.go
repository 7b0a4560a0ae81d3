package dataplane

import "fmt"

// Ports of the in-pod model: app servers listen on AppPort, the nodewise
// probe on ProbePort; the ztunnel
// stand-in's listeners in each ambient pod take redirected outbound traffic on
// OutboundPort and inbound traffic on InboundPort.
const (
	AppPort      = 8080
	ProbePort    = 15080
	OutboundPort = 15001
	InboundPort  = 15006
	// HBONEPort is ztunnel's HBONE (mTLS tunnel) listener: the stand-in
	// opens it in each pod as ztunnel does, but the simulated pods' traffic
	// between nodes is plaintext, so nothing connects to it.
	HBONEPort = 15008
	// ZtunnelMark is the SO_MARK ztunnel puts on its own sockets: the
	// redirect rules let them through untouched.
	ZtunnelMark = 1337
	// podRange is every pod IP of the simulated cluster (RFC 2544 space).
	podRange = "198.18.0.0/16"
)

// redirectRules is the nftables ruleset istio-cni would install inside an
// ambient pod's namespace, in the layout of Istio's nftables backend (1.27
// and later: table inet istio-proxy-nat, base chains prerouting and output,
// the redirects in chains istio-redirect and istio-in-redirect): app (and
// probe) connections out to other pods go to the stand-in's outbound
// listener, connections in to the app (or probe) go to its inbound
// listener; the stand-in's own marked sockets pass. The node agent's
// enrollment check reads it (docs/enrollment.md).
func redirectRules() string { return nftRedirect(true) }

// nftRedirect is redirectRules; with outboundHooked false, chain output is
// a regular chain that no hook reaches (the -bypass istio-cni build's
// fault): every rule is there, and outbound connections skip them.
func nftRedirect(outboundHooked bool) string {
	hook := ""
	if outboundHooked {
		hook = "type nat hook output priority -100; policy accept;"
	}
	return fmt.Sprintf(`table inet istio-proxy-nat {
	chain istio-redirect {
		meta l4proto tcp redirect to :%[4]d
	}
	chain istio-in-redirect {
		meta l4proto tcp redirect to :%[5]d
	}
	chain output {
		%[7]s
		meta mark %[1]d return
		ip daddr %[2]s tcp dport { %[3]d, %[6]d } jump istio-redirect
	}
	chain prerouting {
		type nat hook prerouting priority -100; policy accept;
		iifname "eth0" tcp dport { %[3]d, %[6]d } jump istio-in-redirect
	}
}
`, ZtunnelMark, podRange, AppPort, OutboundPort, InboundPort, ProbePort, hook)
}

// installRedirect loads the redirect rules into the pod namespace.
func installRedirect(podNS string) error {
	return run(redirectRules(), "ip", "netns", "exec", podNS, "nft", "-f", "-")
}

// dropRedirect deletes istio-cni's redirect rules from the pod namespace
// (the -noreadd istio-cni build's fault); again, it changes nothing (the
// table is declared first, so the delete always finds it).
func dropRedirect(podNS string) error {
	return run("table inet istio-proxy-nat\ndelete table inet istio-proxy-nat\n", "ip", "netns", "exec", podNS, "nft", "-f", "-")
}

// unhookOutbound replaces istio-cni's redirect rules in the pod namespace,
// in one transaction, with the same rules whose chain output no hook
// reaches (the -bypass istio-cni build's fault): connections redirected
// before keep their NAT, new outbound ones go straight to their peers.
func unhookOutbound(podNS string) error {
	return run("table inet istio-proxy-nat\ndelete table inet istio-proxy-nat\n"+nftRedirect(false), "ip", "netns", "exec", podNS, "nft", "-f", "-")
}
