package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/istio/precheck"
	"github.com/nodewise/nodewise/orchestrator/judgegate"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/revisions"
)

// rolloutPulls are the images each NodeRollout not yet finished needs: its
// targets' templates on the nodes it selects. None when the cluster does
// not serve NodeRollouts.
func rolloutPulls(ctx context.Context, g *globalFlags, kube kubernetes.Interface, nodes []corev1.Node) ([]precheck.Pull, error) {
	if !g.groupServed(ctx) {
		return nil, nil
	}
	nw, err := g.nodewise()
	if err != nil {
		return nil, err
	}
	list, err := nw.NodeRollouts().List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil // the sidecar wing alone: no NodeRollout CRD
	case err != nil:
		return nil, fmt.Errorf("listing NodeRollouts: %w", err)
	}
	var out []precheck.Pull
	for _, nr := range list.Items {
		switch nr.Status.Phase {
		case v1alpha1.PhaseCompleted, v1alpha1.PhaseAborted, v1alpha1.PhaseRolledBack, v1alpha1.PhaseFailed, v1alpha1.PhaseIdle:
			continue
		}
		p, err := model.NewPolicy(nr.Spec)
		if err != nil {
			continue // the rollout itself says so
		}
		var on []string
		for _, n := range nodes {
			if p.Selector == nil || p.Selector.Matches(model.LabelSet(n.Labels)) {
				on = append(on, n.Name)
			}
		}
		for _, ref := range p.Targets {
			ds, err := kube.AppsV1().DaemonSets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("reading NodeRollout %s's target %s/%s: %w", nr.Name, ref.Namespace, ref.Name, err)
			}
			pull := precheck.Pull{For: fmt.Sprintf("NodeRollout %s's target %s/%s", nr.Name, ref.Namespace, ref.Name), Nodes: on}
			for _, c := range append(ds.Spec.Template.Spec.InitContainers, ds.Spec.Template.Spec.Containers...) {
				pull.Images = append(pull.Images, c.Image)
			}
			out = append(out, pull)
		}
	}
	return out, nil
}

// migrationPulls are the images each RevisionMigration yet to finish (or
// refused: the precheck says why, node by node) needs (revisions.Pulls):
// its To revision's proxy on the nodes of the namespaces it restarts, and
// its istiod. None when the cluster does not serve
// RevisionMigrations.
func migrationPulls(ctx context.Context, g *globalFlags, in precheck.Input, o inventory.Objects) ([]precheck.Pull, error) {
	if !g.groupServed(ctx) {
		return nil, nil
	}
	nw, err := g.nodewise()
	if err != nil {
		return nil, err
	}
	list, err := nw.RevisionMigrations().List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil // the node wing alone: no RevisionMigration CRD
	case err != nil:
		return nil, fmt.Errorf("listing RevisionMigrations: %w", err)
	}
	var out []precheck.Pull
	for _, rm := range list.Items {
		switch rm.Status.Phase {
		case v1alpha1.MigrationSucceeded, v1alpha1.MigrationAborting, v1alpha1.MigrationAborted:
			continue
		}
		out = append(out, revisions.Pulls(rm.Name, rm.Spec, in.Inventory, o, in.RootNamespace)...)
	}
	return out, nil
}

// agentConnections reads, from the agent of every node that runs a sidecar
// pod, its pods' open connections by age. An agent that does not answer is
// left out and named in the returned note.
func agentConnections(ctx context.Context, cfg judgegate.AgentConfig, kube kubernetes.Interface, pods []corev1.Pod) ([]precheck.PodConnections, string, error) {
	client, err := judgegate.Agents(cfg, kube, zap.NewNop())
	if err != nil {
		return nil, "", err
	}
	nodes := map[string]bool{}
	for i := range pods {
		if pods[i].Spec.NodeName != "" && inventory.HasSidecar(&pods[i]) {
			nodes[pods[i].Spec.NodeName] = true
		}
	}
	names := make([]string, 0, len(nodes))
	for n := range nodes {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []precheck.PodConnections
	var silent []string
	for _, n := range names {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		s, err := client.Snapshot(actx, n)
		cancel()
		if err != nil {
			silent = append(silent, n)
			continue
		}
		for _, pc := range s.Pods {
			out = append(out, precheck.PodConnections{Namespace: pc.Namespace, Name: pc.Name, Bounds: wire.AgeBucketBoundsSeconds, Ages: pc.ConnAges})
		}
	}
	note := fmt.Sprintf("connection lifetimes: read from %d of %d node agents", len(names)-len(silent), len(names))
	if len(silent) > 0 {
		note += fmt.Sprintf("; no answer from %s", strings.Join(silent, ", "))
	}
	return out, note, nil
}
