package main

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/nodewise/nodewise/orchestrator/model"
)

// syntheticFleet is plan --offline's stand-in for a cluster: Nodes nodes
// spread evenly over Zones zones, so the plan, its waves, windows and end
// can be seen before there is a cluster to read.
type syntheticFleet struct {
	Nodes, Zones int
}

func (f *syntheticFleet) addFlags(cmd *cobra.Command) {
	cmd.Flags().IntVar(&f.Nodes, "nodes", 0, "with --offline: plan for a synthetic fleet of this many nodes (the file's canaryNodes among them)")
	cmd.Flags().IntVar(&f.Zones, "zones", 1, "with --nodes: spread the synthetic fleet over this many zones")
}

// enabled reports whether --nodes asks for a synthetic fleet, after checking
// the flags make sense together.
func (f syntheticFleet) enabled(cmd *cobra.Command, offline bool) (bool, error) {
	nodes, zones := cmd.Flags().Changed("nodes"), cmd.Flags().Changed("zones")
	switch {
	case zones && !nodes:
		return false, errors.New("--zones needs --nodes: it spreads the synthetic fleet --nodes asks for")
	case !nodes:
		return false, nil
	case !offline:
		return false, errors.New("--nodes and --zones need --offline: online, plan reads the cluster's own nodes")
	case f.Nodes < 1:
		return false, fmt.Errorf("--nodes must be at least 1, got %d", f.Nodes)
	case f.Zones < 1:
		return false, fmt.Errorf("--zones must be at least 1, got %d", f.Zones)
	case f.Zones > f.Nodes:
		return false, fmt.Errorf("--zones %d is more than --nodes %d: give each zone a node (fewer zones or more nodes)", f.Zones, f.Nodes)
	}
	return true, nil
}

// snapshot is the fleet as the planner sees a cluster: every node Ready and
// running each target's old revision, every target found, OnDelete and
// settled. The file's canary nodes are its first nodes; the others are
// node-1, node-2 …, dealt to zone-1, zone-2 … in turn (zero-padded, so
// names sort in number order). The policy's node selector is not applied:
// the fleet stands for the nodes it selects.
func (f syntheticFleet) snapshot(p model.Policy) (model.Snapshot, model.Policy) {
	s := model.Snapshot{}
	pods := map[string]model.PodView{}
	for _, t := range p.Targets {
		tv := model.TargetView{Ref: t, Found: true, Strategy: appsv1.OnDeleteDaemonSetStrategyType, NewestHash: "new", Settled: true}
		s.Targets = append(s.Targets, tv)
		pods[tv.Key()] = model.PodView{Name: t.Name, Hash: "old", Ready: true}
	}
	taken := map[string]bool{}
	names := make([]string, 0, f.Nodes)
	for _, c := range p.Canaries {
		if len(names) < f.Nodes && !taken[c] {
			names, taken[c] = append(names, c), true
		}
	}
	pad := func(n, of int) string { return fmt.Sprintf("%0*d", len(strconv.Itoa(of)), n) }
	for i := 1; len(names) < f.Nodes; i++ {
		if name := "node-" + pad(i, f.Nodes); !taken[name] {
			names = append(names, name)
		}
	}
	for i, name := range names {
		s.Nodes = append(s.Nodes, model.NodeView{Name: name, Zone: "zone-" + pad(i%f.Zones+1, f.Zones), Ready: true, Pods: pods})
	}
	p.Selector = nil
	return s, p
}
