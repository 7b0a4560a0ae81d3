package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/conformance"
	"github.com/nodewise/nodewise/health/gatespec"
	"github.com/nodewise/nodewise/health/remote"
	"github.com/nodewise/nodewise/orchestrator/fleet"
	"github.com/nodewise/nodewise/orchestrator/judgegate"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/planner"
	"github.com/nodewise/nodewise/orchestrator/standing"
)

func newPlanCmd(g *globalFlags) *cobra.Command {
	var (
		file    string
		offline bool
		perSwap time.Duration
		agents  judgegate.AgentConfig
		addrs   remote.AddressPolicy
		output  dataOutput
		fleet   syntheticFleet
	)
	cmd := &cobra.Command{
		Use:   "plan -f rollout.yaml",
		Short: "Print a NodeRollout's ordered plan, waves, windows and estimated duration; writes nothing",
		Long: "plan validates the file as the API server would, has the Prometheus server of spec.gates\n" +
			"evaluate each gate query once, then reads (never writes) the cluster's nodes, DaemonSets,\n" +
			"pods and ControllerRevisions to order the nodes and check the targets.\n" +
			"With --offline it only validates the file, against the CRD's schema and rules as the API\n" +
			"server would (gate queries are not sent to Prometheus); with --nodes N [--zones Z] too it\n" +
			"plans for a synthetic fleet of N Ready nodes over Z zones: the waves, windows and end.\n" +
			"Overlapping windows and blackouts in the past are warned on stderr.\n" +
			"-o json|yaml|name|jsonpath=... prints the order (each node's wave and window), the\n" +
			"phase the plan would take and the estimate; the swap and forecast tables are table-only.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.check(); err != nil {
				return err
			}
			synthetic, err := fleet.enabled(cmd, offline)
			if err != nil {
				return err
			}
			nr, p, err := loadAndCheck(cmd.Context(), g, cmd.InOrStdin(), cmd.ErrOrStderr(), file, addrs, offline)
			if err != nil {
				return err
			}
			if synthetic {
				return planSynthetic(cmd.OutOrStdout(), output, nr.Name, nr.Spec.Gates.Conformance, fleet, p, perSwap)
			}
			if offline && !output.human() {
				r := planReport{Rollout: nr.Name, Offline: true, Nodes: []planNode{}}
				return output.print(cmd.OutOrStdout(), r, r.names, nil)
			}
			if offline {
				_, err := cmd.OutOrStdout().Write([]byte("valid NodeRollout " + nr.Name + " (offline: nodes and targets not checked)\n"))
				return err
			}
			d, err := planAgainstCluster(cmd.Context(), g, nr, p)
			if err != nil {
				return err
			}
			if !output.human() {
				r := newPlanReport(nr.Name, d, p, planner.Estimate(d.Order, p, perSwap))
				r.Standing = nr.Spec.Standing
				return output.print(cmd.OutOrStdout(), r, r.names, nil)
			}
			if err := planner.RenderPlan(cmd.OutOrStdout(), d, p, time.Now(), planner.Estimate(d.Order, p, perSwap)); err != nil {
				return err
			}
			if line := conformance.Planned(nr.Spec.Gates.Conformance); line != "" {
				fmt.Fprintln(cmd.OutOrStdout(), line)
			}
			kube, rc, err := rolloutClients(g)
			if err != nil {
				return err
			}
			if nr.Spec.Standing {
				fmt.Fprintln(cmd.OutOrStdout(), standingPlanLine)
				if live, err := rc.Get(cmd.Context(), nr.Name, metav1.GetOptions{}); err == nil && len(live.Status.Runs) > 0 {
					fmt.Fprintln(cmd.OutOrStdout(), standing.Summary(live, time.Now())) // the policy as applied: its last runs
				}
			}
			swap, deadline, err := renderSwaps(cmd.Context(), cmd.OutOrStdout(), kube, p)
			if err != nil || agents.CAFile == "" || swap == "" {
				return err
			}
			return renderForecast(cmd.Context(), cmd.OutOrStdout(), kube, agents, d.Order, p, swap, deadline)
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "NodeRollout manifest, YAML or JSON, one object (- reads stdin; required)")
	cmd.Flags().BoolVar(&offline, "offline", false, "validate the file only, without reading a cluster")
	cmd.Flags().DurationVar(&perSwap, "swap-estimate", 30*time.Second, "expected time to swap one DaemonSet pod, for the estimate")
	addAgentFlags(cmd.Flags(), &agents, "the plan predicts each node's disruption from its agent")
	fleet.addFlags(cmd)
	addGateAddressFlags(cmd, &addrs)
	output.addFlag(cmd)
	_ = cmd.MarkFlagRequired("filename")
	return cmd
}

// standingPlanLine is the plan's line for a standing policy (spec.standing).
const standingPlanLine = "Standing policy: this is its next run; once it completes the policy goes Idle and rolls each new revision of the targets as a new run (nodewise status lists the runs)"

// planReport is `nodewise plan -o json|yaml|jsonpath`.
type planReport struct {
	Rollout  string   `json:"rollout"`
	Offline  bool     `json:"offline,omitempty"`
	Standing bool     `json:"standing,omitempty"`
	Phase    string   `json:"phase,omitempty"`
	Reason   string   `json:"reason,omitempty"`
	Targets  []string `json:"targets,omitempty"`
	Estimate string   `json:"estimate,omitempty"`
	// MaxParallel and MaxUnavailable are the spec's limits in nodes (a
	// percentage resolved against the selected nodes).
	MaxParallel    int        `json:"maxParallel"`
	MaxUnavailable int        `json:"maxUnavailable"`
	Nodes          []planNode `json:"nodes"`
}

type planNode struct {
	Name   string `json:"name"`
	Zone   string `json:"zone,omitempty"`
	Canary bool   `json:"canary,omitempty"`
	Wave   int    `json:"wave"`
	Window int    `json:"window"`
}

func newPlanReport(name string, d planner.Decision, p model.Policy, est time.Duration) planReport {
	r := planReport{Rollout: name, Phase: string(d.Phase), Reason: d.Reason, Estimate: est.String(),
		MaxParallel: d.MaxParallel, MaxUnavailable: d.MaxUnavailable, Nodes: []planNode{}}
	for _, t := range p.Targets {
		r.Targets = append(r.Targets, t.Namespace+"/"+t.Name)
	}
	for _, n := range d.Order {
		r.Nodes = append(r.Nodes, planNode{Name: n.Name, Zone: n.Zone, Canary: n.Canary, Wave: n.Wave, Window: n.Window})
	}
	return r
}

// names are the nodes in the order they are upgraded (-o name).
func (r planReport) names() []string {
	var out []string
	for _, n := range r.Nodes {
		out = append(out, "node/"+n.Name)
	}
	return out
}

// loadAndCheck reads and validates the file (- is stdin), prints its
// warnings to warn and, unless offline, checks it against the cluster: a
// server dry-run (the CRD's own validation), then unknown DaemonSets,
// RollingUpdate targets, missing canaries.
func loadAndCheck(ctx context.Context, g *globalFlags, in io.Reader, warn io.Writer, file string, addrs remote.AddressPolicy, offline bool) (*v1alpha1.NodeRollout, model.Policy, error) {
	rf, err := readRollout(ctx, in, file, addrs)
	if err != nil {
		return nil, rf.policy, err
	}
	rf.warn(warn)
	if err := checkRollout(ctx, g, rf, addrs, offline); err != nil {
		return nil, rf.policy, err
	}
	return rf.rollout, rf.policy, nil
}

// checkGates validates spec.gates as the judge will read them. Online, the
// Prometheus server of spec.gates.prometheus evaluates each query once
// (gatespec.Validate), so a malformed PromQL query or an unreachable server
// is refused before anything is written; offline, thresholds and the queries'
// shape are checked without that round trip. Both refuse an address addrs
// does not allow (the orchestrator would fail the node on it), unqueried.
func checkGates(ctx context.Context, gates v1alpha1.GatesSpec, addrs remote.AddressPolicy, offline bool) error {
	err := addrs.Validate()
	switch {
	case err != nil:
	case offline:
		if _, err = gatespec.Config(gates); err == nil {
			_, err = gatespec.Prometheus(gates, addrs, zap.NewNop())
		}
	default:
		err = gatespec.Validate(ctx, gates, addrs, zap.NewNop())
	}
	if errors.Is(err, remote.ErrAddressRefused) {
		err = fmt.Errorf("%w (if the orchestrator allows it, pass the same --gate-address-allow here)", err)
	}
	if err != nil {
		return errors.New(planner.OneLine(err))
	}
	return nil
}

// planSynthetic prints the plan of p for the synthetic fleet f, as the
// online plan prints a cluster's (its swaps and forecast need the cluster).
func planSynthetic(w io.Writer, output dataOutput, name string, gate *v1alpha1.ConformanceGate, f syntheticFleet, p model.Policy, perSwap time.Duration) error {
	snap, p := f.snapshot(p)
	now := time.Now()
	d := planner.Plan(snap, p, now)
	est := planner.Estimate(d.Order, p, perSwap)
	if !output.human() {
		r := newPlanReport(name, d, p, est)
		r.Offline = true
		return output.print(w, r, r.names, nil)
	}
	fmt.Fprintf(w, "valid NodeRollout %s; planned for a synthetic fleet of %d nodes in %d zones (offline: names and zones made up)\n", name, f.Nodes, f.Zones)
	if err := planner.RenderPlan(w, d, p, now, est); err != nil {
		return err
	}
	if line := conformance.Planned(gate); line != "" {
		_, err := fmt.Fprintln(w, line)
		return err
	}
	return nil
}

func planAgainstCluster(ctx context.Context, g *globalFlags, nr *v1alpha1.NodeRollout, p model.Policy) (planner.Decision, error) {
	kube, _, err := rolloutClients(g)
	if err != nil {
		return planner.Decision{}, err
	}
	snap, err := fleet.SnapshotFromAPI(ctx, kube, nr, p)
	if err != nil {
		return planner.Decision{}, err
	}
	return planner.Plan(snap, p, time.Now()), nil
}
