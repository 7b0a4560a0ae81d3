package dataplane

import "fmt"

// gatewayIP is the address every pod routes through: each pod's veth leg in
// the fabric namespace carries it (as Calico does with 169.254.1.1).
const gatewayIP = "169.254.1.1"

// fabric is the routing namespace that joins every pod of every simulated
// node: one veth per pod, a /32 route per pod IP, forwarding on.
type fabric struct {
	name string
}

func newFabric(name string) (*fabric, error) {
	if err := addNetns(name); err != nil {
		return nil, err
	}
	if err := run("", "ip", "netns", "exec", name, "sysctl", "-qw", "net.ipv4.ip_forward=1"); err != nil {
		return nil, err
	}
	return &fabric{name: name}, nil
}

// attach joins the pod namespace podNS to the fabric with a veth whose fabric
// leg is named leg, and gives the pod podIP.
func (f *fabric) attach(podNS, leg, podIP string) error {
	steps := [][]string{
		{"link", "add", "eth0", "netns", podNS, "type", "veth", "peer", "name", leg, "netns", f.name},
		{"-n", podNS, "addr", "add", podIP + "/32", "dev", "eth0"},
		{"-n", podNS, "link", "set", "eth0", "up"},
		{"-n", podNS, "route", "add", gatewayIP, "dev", "eth0", "scope", "link"},
		{"-n", podNS, "route", "add", "default", "via", gatewayIP, "dev", "eth0"},
		{"-n", f.name, "addr", "add", gatewayIP + "/32", "dev", leg},
		{"-n", f.name, "link", "set", leg, "up"},
		{"-n", f.name, "route", "add", podIP + "/32", "dev", leg},
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return fmt.Errorf("attaching %s (%s): %w", podNS, podIP, err)
		}
	}
	return nil
}

// detach removes the pod's veth (and with it the pod's leg and route).
func (f *fabric) detach(leg string) error {
	return ip("-n", f.name, "link", "del", leg)
}
