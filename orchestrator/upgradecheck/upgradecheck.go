// Package upgradecheck runs, before a NodeRollout's first node, the checks
// of nodewise precheck (istio/precheck) that the orchestrator can decide
// from the API: new target images some selected node failed to pull,
// revision tags and namespace labels that point at no istiod, dry-run
// authorization policies that older ztunnels enforce, and the
// workload-discovery response against gRPC's limit. It writes nothing.
package upgradecheck

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/istio/precheck"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// TTL is how long a hold stands before the cluster is read again: the
// passes of a held rollout (one every resync) then list the cluster's pods
// once per TTL, and a hazard put right shows within it.
const TTL = 10 * time.Second

// Reader reads the cluster for a rollout's precheck. A zero Reader but for
// Kube is ready; Dynamic nil reads no AuthorizationPolicy.
type Reader struct {
	Kube           kubernetes.Interface
	Dynamic        dynamic.Interface
	IstioNamespace string
	Now            func() time.Time

	mu   sync.Mutex
	held map[types.UID]hold
}

// hold is a rollout's last hold, for its spec's generation.
type hold struct {
	generation int64
	at         time.Time
	reason     string
}

// Hold says why nr may not start its first node: the precheck's error
// findings, one clause each, or why the cluster could not be read (the
// check fails closed); "" when it found no error. targets' images are
// checked on nodes, the nodes the rollout selects.
func (r *Reader) Hold(ctx context.Context, nr *v1alpha1.NodeRollout, targets []model.TargetView, nodes []string) string {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	r.mu.Lock()
	h, ok := r.held[nr.UID]
	r.mu.Unlock()
	if ok && h.generation == nr.Generation && now().Sub(h.at) < TTL && !now().Before(h.at) {
		return h.reason
	}
	reason := r.check(ctx, nr, targets, nodes)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.held == nil {
		r.held = map[types.UID]hold{}
	}
	delete(r.held, nr.UID)
	if reason != "" {
		r.held[nr.UID] = hold{generation: nr.Generation, at: now(), reason: reason}
	}
	return reason
}

// check reads the cluster and runs the checks.
func (r *Reader) check(ctx context.Context, nr *v1alpha1.NodeRollout, targets []model.TargetView, nodes []string) string {
	fail := func(err error) string { return "precheck could not read the cluster: " + err.Error() }
	opts := inventory.Options{IstioNamespace: r.IstioNamespace}
	o, err := inventory.List(ctx, r.Kube, opts)
	if err != nil {
		return fail(err)
	}
	inv, err := inventory.Build(opts, o)
	if err != nil {
		return fail(err)
	}
	in := precheck.Input{Inventory: inv, Pods: o.Pods}
	if in.AuthorizationPolicies, err = precheck.List(ctx, r.Dynamic, precheck.AuthorizationPolicies); err != nil {
		return fail(err)
	}
	for _, tv := range targets {
		if len(tv.Images) > 0 {
			in.Pulls = append(in.Pulls, precheck.Pull{For: "NodeRollout " + nr.Name + "'s target " + tv.Key(), Images: tv.Images, Nodes: nodes})
		}
	}
	if len(in.Pulls) > 0 {
		if in.Nodes, err = precheck.Nodes(ctx, r.Kube); err != nil {
			return fail(err)
		}
	}
	if errs := precheck.Errors(precheck.Check(in)); len(errs) > 0 {
		return precheck.Headline(errs)
	}
	return ""
}
