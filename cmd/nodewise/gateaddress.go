package main

import (
	"github.com/spf13/cobra"

	"github.com/nodewise/nodewise/health/remote"
)

// addGateAddressFlags adds the orchestrator's --gate-address-allow and
// --cluster-domain to plan and apply, which refuse a
// spec.gates.prometheus.address the orchestrator would refuse: by default
// any host but a cluster Service. The CLI cannot read the orchestrator's
// flags, so an orchestrator started with more hosts (the chart's
// gateAddressAllow) needs the same hosts here.
func addGateAddressFlags(cmd *cobra.Command, p *remote.AddressPolicy) {
	cmd.Flags().StringSliceVar(&p.Allow, "gate-address-allow", nil,
		"hosts spec.gates.prometheus may query besides the cluster's Services, as the orchestrator's flag of the same name (host names, IPs or *.<domain>)")
	cmd.Flags().StringVar(&p.ClusterDomain, "cluster-domain", remote.DefaultClusterDomain, "the cluster's DNS domain, as the orchestrator's flag of the same name")
}
