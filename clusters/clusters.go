// Package clusters reads where the mesh stands in several clusters at once:
// each cluster's istiod revisions, data-plane versions, skew, and the
// NodeRollouts and RevisionMigrations in it. The clusters come from
// kubeconfig contexts or from Secrets that hold a kubeconfig each (as
// Cluster API keeps them); each is read concurrently, under its own
// timeout, and one that cannot be read is reported with its error, never
// left out.
package clusters

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/istio/skew"
)

// Cluster is one cluster to read: its name, and the client configuration
// to read it with, or why there is none (a Secret without a kubeconfig).
type Cluster struct {
	Name   string
	Config *rest.Config
	Err    error
}

// Report is what one cluster shows. Error is set, and the rest empty, when
// the cluster could not be read.
type Report struct {
	Cluster string `json:"cluster"`
	Server  string `json:"server,omitempty"`
	Error   string `json:"error,omitempty"`
	// Revisions are the istiod revisions installed, with their tags.
	Revisions []inventory.Revision `json:"revisions"`
	// DataPlane counts the proxies per component and version: ztunnel and
	// istio-cni per node, sidecars per pod.
	DataPlane []Proxies `json:"dataPlane"`
	// Skew is the data-plane components outside Istio's supported skew, of
	// Components checked.
	Skew       int `json:"skew"`
	Components int `json:"components"`
	// Upgrades are the cluster's NodeRollouts and RevisionMigrations.
	Upgrades []Upgrade `json:"upgrades"`
}

// Proxies is how many of one component run one version.
type Proxies struct {
	Component string `json:"component"` // ztunnel, istio-cni or sidecar
	Version   string `json:"version"`
	Count     int    `json:"count"`
}

// Upgrade is one NodeRollout or RevisionMigration and where it stands.
type Upgrade struct {
	Kind  string `json:"kind"`
	Name  string `json:"name"`
	Phase string `json:"phase"`
	// Progress is nodes done of the total (NodeRollout) or waves done of
	// the total (RevisionMigration).
	Progress string `json:"progress"`
	// Reason says why it waits or halted, or what it does.
	Reason string `json:"reason,omitempty"`
}

// Options says how to read each cluster.
type Options struct {
	// Timeout bounds the reading of one cluster (default 15s).
	Timeout time.Duration
	// IstioNamespace is where istiod, ztunnel and istio-cni run (default
	// istio-system).
	IstioNamespace string
}

// Read reads every cluster concurrently and returns a report for each, in
// the order given; a cluster that cannot be read within the timeout has its
// error in its report.
func Read(ctx context.Context, cs []Cluster, o Options) []Report {
	if o.Timeout <= 0 {
		o.Timeout = 15 * time.Second
	}
	out := make([]Report, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, o.Timeout)
			defer cancel()
			r, err := readOne(ctx, c, o)
			if err != nil {
				r = Report{Cluster: c.Name, Server: r.Server, Error: oneLine(ctx, err, o.Timeout)}
			}
			out[i] = r
		})
	}
	wg.Wait()
	return out
}

// Unreachable is the clusters whose reports hold an error.
func Unreachable(rs []Report) []string {
	var out []string
	for _, r := range rs {
		if r.Error != "" {
			out = append(out, r.Cluster)
		}
	}
	return out
}

func readOne(ctx context.Context, c Cluster, o Options) (Report, error) {
	r := Report{Cluster: c.Name, Revisions: []inventory.Revision{}, DataPlane: []Proxies{}, Upgrades: []Upgrade{}}
	if c.Err != nil {
		return r, c.Err
	}
	r.Server = c.Config.Host
	cfg := rest.CopyConfig(c.Config)
	cfg.Timeout = o.Timeout
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return r, err
	}
	nw, err := v1alpha1.NewForConfig(cfg)
	if err != nil {
		return r, err
	}
	inv, err := inventory.Observe(ctx, kube, inventory.Options{IstioNamespace: o.IstioNamespace})
	if err != nil {
		return r, err
	}
	r.Revisions = append(r.Revisions, inv.Revisions...)
	r.DataPlane = dataPlane(inv)
	obs, err := skew.FromInventory(inv)
	if err != nil {
		return r, err
	}
	r.Components, r.Skew = len(obs), len(skew.Check(skew.DefaultPolicy(), obs))
	if r.Upgrades, err = upgrades(ctx, nw); err != nil {
		return r, err
	}
	return r, nil
}

func dataPlane(inv inventory.Inventory) []Proxies {
	count := map[Proxies]int{}
	for _, n := range inv.Nodes {
		if n.Ztunnel != "" {
			count[Proxies{Component: "ztunnel", Version: n.Ztunnel}]++
		}
		if n.CNI != "" {
			count[Proxies{Component: "istio-cni", Version: n.CNI}]++
		}
	}
	for _, p := range inv.Pods {
		if p.Mode == inventory.ModeSidecar {
			count[Proxies{Component: "sidecar", Version: p.Version}]++
		}
	}
	out := make([]Proxies, 0, len(count))
	for k, n := range count {
		k.Count = n
		out = append(out, k)
	}
	slices.SortFunc(out, func(a, b Proxies) int {
		return cmp.Or(cmp.Compare(a.Component, b.Component), cmp.Compare(a.Version, b.Version))
	})
	return out
}

// upgrades lists the cluster's NodeRollouts and RevisionMigrations; a
// cluster without nodewise's CRDs has none.
func upgrades(ctx context.Context, c *v1alpha1.Client) ([]Upgrade, error) {
	out := []Upgrade{}
	nrs, err := c.NodeRollouts().List(ctx, metav1.ListOptions{})
	if err != nil && !notInstalled(err) {
		return nil, fmt.Errorf("listing NodeRollouts: %w", err)
	}
	if err == nil {
		for _, nr := range nrs.Items {
			n := nr.Status.Counts
			out = append(out, Upgrade{Kind: "NodeRollout", Name: nr.Name, Phase: string(nr.Status.Phase),
				Progress: fmt.Sprintf("%d/%d nodes", n.Done+n.Skipped, n.Total), Reason: firstLine(rolloutReason(&nr.Status))})
		}
	}
	rms, err := c.RevisionMigrations().List(ctx, metav1.ListOptions{})
	if err != nil && !notInstalled(err) {
		return nil, fmt.Errorf("listing RevisionMigrations: %w", err)
	}
	if err == nil {
		for _, rm := range rms.Items {
			out = append(out, Upgrade{Kind: "RevisionMigration", Name: rm.Name, Phase: string(rm.Status.Phase),
				Progress: fmt.Sprintf("%d/%d waves", wavesDone(rm.Status), len(rm.Status.Waves)), Reason: firstLine(rm.Status.Reason)})
		}
	}
	return out, nil
}
