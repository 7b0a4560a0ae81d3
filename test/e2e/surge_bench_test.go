package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/kubectl/pkg/util/podutils"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/nodewise/nodewise/orchestrator/swap"
	"github.com/nodewise/nodewise/sim/cluster"
)

// BenchmarkSwapMechanisms measures, on the simulated cluster (real
// apiserver, DaemonSet controller and scheduler; a 3 s drain modelled by the
// kubelet), the ways nodewise could swap ztunnel: (replace) today's delete
// under OnDelete; (gated) a RollingUpdate maxSurge 100 % / maxUnavailable 0
// DaemonSet whose surge pods a MutatingAdmissionPolicy gates on the nodes
// nodewise holds (a ConfigMap lists them), nodewise un-gating one node at a
// time; (bridge) the surge primitive under OnDelete (orchestrator/surge.go).
// For each it prints the per-node swap time, node-seconds without a Ready
// ztunnel, pods the DaemonSet created, nodewise's API writes per node, and
// the hazards: with nodewise down, a held node whose old pod is deleted and a
// node that joins (seconds until a Ready ztunnel, capped at 15 s), whether a
// chart upgrade swaps nodes by itself, and whether helm --wait's DaemonSet
// check passes mid-rollout. The choice and these figures are in
// docs/orchestrator.md.
func BenchmarkSwapMechanisms(b *testing.B) {
	var rows []mechanismRow
	for i := 0; i < b.N; i++ {
		for _, m := range []string{"replace", "gated", "bridge"} {
			rows = append(rows, measureMechanism(b, m))
		}
	}
	fmt.Printf("\nztunnel swap mechanisms, 4+1 simulated nodes, 3 s drain (one run each):\n")
	fmt.Printf("%-8s %-16s %-22s %-10s %-14s %-26s %-22s %-22s %-12s\n", "swap", "per-node swap", "node-s without Ready", "DS pods", "writes/node", "down: held pod deleted", "down: node added", "chart alone swaps", "helm --wait")
	for _, r := range rows {
		fmt.Printf("%-8s %-16s %-22s %-10d %-14.1f %-26s %-22s %-22s %-12s\n", r.name, r.perNode.Round(10*time.Millisecond), fmt.Sprintf("%.1f", r.bareSeconds),
			r.dsCreated, r.writesPerNode, r.heldDeleted, r.nodeAdded, r.aloneSwaps, r.helmWait)
	}
}

type mechanismRow struct {
	name                                         string
	perNode                                      time.Duration
	bareSeconds                                  float64
	dsCreated                                    int
	writesPerNode                                float64
	heldDeleted, nodeAdded, aloneSwaps, helmWait string
}

const heldGate = "nodewise.io/held"

func measureMechanism(b *testing.B, name string) mechanismRow {
	e := newEnv(b, 4, 1)
	ctx := context.Background()
	row := mechanismRow{name: name}
	if name == "gated" {
		e.installGatePolicy(b)
		e.setHeld(b, "node-001", "node-002", "node-003", "node-004")
		patch := []byte(`{"spec":{"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"maxSurge":"100%","maxUnavailable":0}}}}`)
		if _, err := e.c.Client.AppsV1().DaemonSets(ns).Patch(ctx, cluster.ZtunnelName, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	e.drainModel(3 * time.Second)
	before := e.ztunnelUIDs("")
	sampler := startBareSampler(e)
	e.setImage(b, "1.28.1")
	time.Sleep(8 * time.Second)
	changed := 0
	after := e.ztunnelUIDs("")
	for uid := range before {
		if _, ok := after[uid]; !ok {
			changed++
		}
	}
	row.aloneSwaps = fmt.Sprintf("%d/4 in 8 s (held)", changed)

	writes := 0
	start := time.Now()
	swap := func(node string) {
		n, err := e.swapWith(ctx, name, node)
		if err != nil {
			b.Fatalf("%s on %s: %v", name, node, err)
		}
		writes += n
	}
	swap("node-001")
	swap("node-002")
	elapsed := time.Since(start)
	row.bareSeconds = sampler.stop() // the probes below are hazards, counted apart

	// nodewise down: someone deletes node-003's old pod, and a node joins.
	row.helmWait = fmt.Sprint(e.helmWaitPasses(b))
	old := e.ztunnelPod("node-003")
	if err := e.c.Client.CoreV1().Pods(ns).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil {
		b.Fatal(err)
	}
	row.heldDeleted = e.secondsUntilReady("node-003", old.UID, 15*time.Second)
	joined := time.Now()
	spec, stop, err := e.c.AddNode(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	row.nodeAdded = e.secondsUntilReady(spec.Name, "", 15*time.Second)
	if !strings.HasPrefix(row.nodeAdded, "none") {
		row.nodeAdded = fmt.Sprintf("%.1f s", time.Since(joined).Seconds())
	}

	sampler = startBareSampler(e)
	start = time.Now()
	for _, n := range []string{"node-003", "node-004", spec.Name} {
		swap(n)
	}
	elapsed += time.Since(start)
	row.perNode = elapsed / 5
	row.writesPerNode = float64(writes) / 5
	row.bareSeconds += sampler.stop()
	row.dsCreated = e.dsCreatedSince(before)

	if name == "gated" {
		// The chart upgraded while the policy holds no node (nodewise not
		// running a rollout, or not yet holding the nodes).
		e.setHeld(b)
		before = e.ztunnelUIDs("")
		e.setImage(b, "1.28.2")
		time.Sleep(8 * time.Second)
		changed = 0
		after = e.ztunnelUIDs("")
		for uid := range before {
			if _, ok := after[uid]; !ok {
				changed++
			}
		}
		row.aloneSwaps += fmt.Sprintf(", %d/5 unheld", changed)
	}
	return row
}

// swapWith swaps ztunnel on one node with a mechanism; it returns nodewise's
// API writes.
func (e *env) swapWith(ctx context.Context, name, node string) (int, error) {
	deadline := time.Now().Add(time.Minute)
	switch name {
	case "bridge":
		res, err := swap.Surger{Kube: e.c.Client}.Swap(ctx, ztunnelRef, node, deadline)
		return res.Writes, err
	case "replace":
		hash := e.newestHash(cluster.ZtunnelName)
		p := e.ztunnelPodOrNil(node)
		writes := 0
		if p != nil && p.Labels["controller-revision-hash"] != hash {
			if err := e.c.Client.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil {
				return 0, err
			}
			writes++
		}
		return writes, e.waitNodeOn(ctx, node, hash, deadline)
	}
	// gated: stop holding the node, then ungate its surge pod.
	hash := e.newestHash(cluster.ZtunnelName)
	cm, err := e.c.Client.CoreV1().ConfigMaps(ns).Get(ctx, "nodewise-held", metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	var held []string
	for _, n := range strings.Split(cm.Data["held"], ",") {
		if n != node && n != "" {
			held = append(held, n)
		}
	}
	e.setHeld(e.t, held...)
	writes := 1
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := e.c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=ztunnel"})
		if err != nil {
			return false, nil
		}
		for _, p := range pods.Items {
			if len(p.Spec.SchedulingGates) > 0 && targetNode(&p) == node {
				if _, err := e.c.Client.CoreV1().Pods(ns).Patch(ctx, p.Name, types.JSONPatchType, []byte(`[{"op":"remove","path":"/spec/schedulingGates"}]`), metav1.PatchOptions{}); err != nil {
					return false, nil
				}
				writes++
				return true, nil
			}
			if p.Spec.NodeName == node && p.Labels["controller-revision-hash"] == hash {
				return true, nil // not gated (a node nodewise did not hold)
			}
		}
		return false, nil
	})
	if err != nil {
		return writes, fmt.Errorf("no gated pod on %s: %w", node, err)
	}
	return writes, e.waitNodeOn(ctx, node, hash, deadline)
}

// targetNode is the node a DaemonSet pod is for (spec.nodeName once bound,
// else its required node affinity).
func targetNode(p *corev1.Pod) string {
	if p.Spec.NodeName != "" {
		return p.Spec.NodeName
	}
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			for _, f := range t.MatchFields {
				if f.Key == "metadata.name" && len(f.Values) == 1 {
					return f.Values[0]
				}
			}
		}
	}
	return ""
}

// waitNodeOn waits until the node's only live ztunnel is Ready on hash.
func (e *env) waitNodeOn(ctx context.Context, node, hash string, deadline time.Time) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Until(deadline), true, func(ctx context.Context) (bool, error) {
		p := e.ztunnelPodOrNil(node)
		return p != nil && podutils.IsPodReady(p) && p.Labels["controller-revision-hash"] == hash, nil
	})
}

// secondsUntilReady is how long until the node has a Ready, live ztunnel
// other than the pod with UID not (capped).
func (e *env) secondsUntilReady(node string, not types.UID, limit time.Duration) string {
	start := time.Now()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, limit, true, func(ctx context.Context) (bool, error) {
		p := e.ztunnelPodOrNil(node)
		return p != nil && p.UID != not && podutils.IsPodReady(p), nil
	})
	if err != nil {
		return fmt.Sprintf("none for ≥ %s", limit)
	}
	return fmt.Sprintf("%.1f s", time.Since(start).Seconds())
}

// helmWaitPasses is helm --wait's DaemonSet check (helm skips OnDelete).
func (e *env) helmWaitPasses(b *testing.B) bool {
	ds, err := e.c.Client.AppsV1().DaemonSets(ns).Get(context.Background(), cluster.ZtunnelName, metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if ds.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType {
		return true
	}
	return ds.Status.ObservedGeneration >= ds.Generation && ds.Status.UpdatedNumberScheduled == ds.Status.DesiredNumberScheduled &&
		ds.Status.NumberAvailable == ds.Status.DesiredNumberScheduled
}

func (e *env) setImage(b *testing.B, version string) {
	patch := []byte(`{"spec":{"template":{"spec":{"containers":[{"name":"istio-proxy","image":"docker.io/istio/ztunnel:` + version + `"}]}}}}`)
	if _, err := e.c.Client.AppsV1().DaemonSets(ns).Patch(context.Background(), cluster.ZtunnelName, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		b.Fatal(err)
	}
	e.newestHash(cluster.ZtunnelName)
}

func (e *env) setHeld(t testing.TB, nodes ...string) {
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "nodewise-held", Namespace: ns}, Data: map[string]string{"held": strings.Join(nodes, ",")}}
	if _, err := e.c.Client.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		if _, err := e.c.Client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// installGatePolicy adds a scheduling gate to every ztunnel pod created for
// a node the ConfigMap nodewise-held lists (by the DaemonSet pod's required
// node affinity).
func (e *env) installGatePolicy(b *testing.B) {
	ctx := context.Background()
	fail := admissionregistrationv1.Fail
	pol := &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "nodewise-hold-ztunnel"},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			ParamKind: &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
			MatchConstraints: &admissionregistrationv1.MatchResources{
				ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}}},
				ObjectSelector:    &metav1.LabelSelector{MatchLabels: map[string]string{"app": "ztunnel"}},
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			},
			MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "held-node",
				Expression: `has(object.spec.affinity) && has(object.spec.affinity.nodeAffinity) && has(object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution) && ` +
					`object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms.exists(t, has(t.matchFields) && t.matchFields.exists(f, f.key == 'metadata.name' && f.values.exists(v, v in params.data.held.split(','))))`}},
			Mutations: []admissionregistrationv1.Mutation{{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{
					Expression: `Object{spec: Object.spec{schedulingGates: [Object.spec.schedulingGates{name: "` + heldGate + `"}]}}`}}},
			FailurePolicy:      &fail,
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
		},
	}
	if _, err := e.c.Client.AdmissionregistrationV1().MutatingAdmissionPolicies().Create(ctx, pol, metav1.CreateOptions{}); err != nil {
		b.Fatalf("creating the MutatingAdmissionPolicy: %v", err)
	}
	deny := admissionregistrationv1.AllowAction
	bind := &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "nodewise-hold-ztunnel"},
		Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: pol.Name,
			ParamRef: &admissionregistrationv1.ParamRef{Name: "nodewise-held", Namespace: ns, ParameterNotFoundAction: &deny}},
	}
	if _, err := e.c.Client.AdmissionregistrationV1().MutatingAdmissionPolicyBindings().Create(ctx, bind, metav1.CreateOptions{}); err != nil {
		b.Fatalf("creating the binding: %v", err)
	}
	time.Sleep(2 * time.Second) // the policy reaches the admission chain
}

// dsCreatedSince counts live ztunnel pods the DaemonSet created (controlled
// by it, not named as a bridge) that were not there before.
func (e *env) dsCreatedSince(before map[types.UID]string) int {
	pods, err := e.c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=ztunnel"})
	if err != nil {
		return -1
	}
	n := 0
	for _, p := range pods.Items {
		if _, old := before[p.UID]; !old && !strings.Contains(p.Name, "-surge-") {
			n++
		}
	}
	return n
}

// bareSampler sums, every 0.1 s, the nodes without a Ready live ztunnel
// (once they have had one).
type bareSampler struct {
	mu     sync.Mutex
	bare   float64
	cancel context.CancelFunc
	done   chan struct{}
}

func startBareSampler(e *env) *bareSampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &bareSampler{cancel: cancel, done: make(chan struct{})}
	seen := map[string]bool{}
	go func() {
		defer close(s.done)
		for ctx.Err() == nil {
			time.Sleep(100 * time.Millisecond)
			pods, err := e.c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				continue
			}
			ready := map[string]bool{}
			for i := range pods.Items {
				p := &pods.Items[i]
				if isZtunnel(p) && p.DeletionTimestamp == nil && podutils.IsPodReady(p) {
					ready[p.Spec.NodeName] = true
					seen[p.Spec.NodeName] = true
				}
			}
			s.mu.Lock()
			for n := range seen {
				if !ready[n] {
					s.bare += 0.1
				}
			}
			s.mu.Unlock()
		}
	}()
	return s
}

func (s *bareSampler) stop() float64 {
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bare
}
