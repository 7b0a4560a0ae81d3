package demo

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/remote"
	"github.com/nodewise/nodewise/istio/freshness"
	"github.com/nodewise/nodewise/istio/inventory"
	"github.com/nodewise/nodewise/istio/skew"
	"github.com/nodewise/nodewise/orchestrator/judgegate"
	"github.com/nodewise/nodewise/revisions"
	"github.com/nodewise/nodewise/sim/cluster"
)

// The sidecar half of the mixed cluster: namespaces move between istiod
// revisions in waves through a revision tag, each wave judged by the node
// agents from outside the mesh (revisions.AgentGate), as cmd/orchestrator
// wires the RevisionMigration controller.

// The AgentGate's timing in the demo and the live tests: a sample a
// second, so a 10 s baseline and soak hold enough.
const (
	waveSoak     = 10 * time.Second
	waveBaseline = 10 * time.Second
)

// startMigrations installs the RevisionMigration CRD from crdDir and runs
// the controller with the spec's gates and an AgentGate over the agents.
// The agents are sampled from now on, and stop ends it all. The controller's
// metrics go to reg (nil: a registry of its own).
func startMigrations(ctx context.Context, c *cluster.Cluster, crdDir string, agents *judgegate.AgentConfig, log *zap.Logger, reg prometheus.Registerer) (v1alpha1.RevisionMigrationInterface, func(), error) {
	if err := cluster.InstallCRD(ctx, c.Config, filepath.Join(crdDir, "nodewise.io_revisionmigrations.yaml")); err != nil {
		return nil, nil, err
	}
	source, err := judgegate.Agents(*agents, c.Client, log)
	if err != nil {
		return nil, nil, err
	}
	gate, err := revisions.NewAgentGate(revisions.AgentGateConfig{Source: source, Soak: waveSoak, Baseline: waveBaseline, Every: time.Second, Log: log.Named("wavejudge")})
	if err != nil {
		return nil, nil, err
	}
	nwc, err := v1alpha1.NewForConfig(c.Config)
	if err != nil {
		return nil, nil, err
	}
	mc := nwc.RevisionMigrations()
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	ctrl, err := revisions.New(revisions.Config{
		Kube: c.Client, Migrations: mc, Log: log.Named("migration"), Registry: reg,
		Gate: revisions.Gates(revisions.SpecGates(remote.AddressPolicy{}, log), gate), Interval: 500 * time.Millisecond,
	})
	if err != nil {
		return nil, nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{}, 2)
	go func() { _ = gate.Run(rctx); done <- struct{}{} }()
	go func() { _ = ctrl.Run(rctx); done <- struct{}{} }()
	var nodes []string
	for _, n := range c.Nodes {
		nodes = append(nodes, n.Name)
	}
	gate.Track(ctx, nodes) // samples from before the first wave: its baseline
	return mc, func() { cancel(); <-done; <-done }, nil
}

// runMigration creates rm and waits for a terminal phase, printing each
// change of phase or wave.
func runMigration(ctx context.Context, mc v1alpha1.RevisionMigrationInterface, rm *v1alpha1.RevisionMigration, out io.Writer) (*v1alpha1.RevisionMigration, error) {
	if _, err := mc.Create(ctx, rm, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("creating RevisionMigration %s: %w", rm.Name, err)
	}
	line := ""
	var cur *v1alpha1.RevisionMigration
	err := waitList(ctx, 5*time.Minute, cluster.ListWatch(mc.List, mc.Watch, cluster.ByName(rm.Name)), &v1alpha1.RevisionMigration{}, func(objs []any) (bool, string) {
		if len(objs) == 0 {
			return false, "not found"
		}
		m, ok := objs[0].(*v1alpha1.RevisionMigration)
		if !ok {
			return false, "not a RevisionMigration"
		}
		cur = m
		if l := fmt.Sprintf("%s: %s", m.Status.Phase, m.Status.Reason); m.Status.Phase != "" && l != line {
			fmt.Fprintf(out, "   %s  %s\n", time.Now().Format("15:04:05"), l)
			line = l
		}
		switch m.Status.Phase {
		case v1alpha1.MigrationSucceeded, v1alpha1.MigrationHalted, v1alpha1.MigrationRefused, v1alpha1.MigrationAborted:
			return true, ""
		}
		return false, line
	})
	if err != nil {
		return nil, fmt.Errorf("RevisionMigration %s did not finish: %w", rm.Name, err)
	}
	return cur, nil
}

// canaryFirst moves the namespace canary first (its own wave), then the rest.
func canaryFirst(name, from, to, tag, canary string) *v1alpha1.RevisionMigration {
	all := int32(100)
	return &v1alpha1.RevisionMigration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.RevisionMigrationSpec{From: from, To: to, Tag: tag, RateLimit: v1alpha1.RestartRateLimit{PodsPerSecond: 2},
			Waves: []v1alpha1.Wave{
				{Name: "canary", NamespaceSelector: &v1alpha1.WaveSelector{MatchLabels: map[string]v1alpha1.LabelValue{"kubernetes.io/metadata.name": v1alpha1.LabelValue(canary)}}},
				{Name: "rest", Percent: &all},
			}},
	}
}

// legacyNamespace is a namespace on the default revision implicitly
// (istio-injection=enabled, the common state of a real cluster), with one
// Deployment of two pods, which a migration adopts.
func legacyNamespace(ctx context.Context, c *cluster.Cluster, name string) error {
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"istio-injection": "enabled"}},
	}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	two := int32(2)
	labels := map[string]string{"app": "records"}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "records", Namespace: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &two,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "records", Image: "docker.io/nodewise/sample-records:1.0"}}},
			},
		},
	}
	if _, err := c.Client.AppsV1().Deployments(name).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating %s/records: %w", name, err)
	}
	return waitSamples(ctx, c)
}

// printProxies prints each namespace's running sidecars by version.
func printProxies(ctx context.Context, c *cluster.Cluster, out io.Writer, namespaces ...string) error {
	for _, ns := range namespaces {
		v, err := proxyVersions(ctx, c, ns)
		if err != nil {
			return err
		}
		var parts []string
		for version, n := range v {
			parts = append(parts, fmt.Sprintf("%s ×%d", version, n))
		}
		sort.Strings(parts)
		fmt.Fprintf(out, "   %-8s sidecars %s\n", ns, strings.Join(parts, ", "))
	}
	return nil
}

// teams labels each namespace with its team, as a platform's namespaces
// carry them, for the freshness lines.
func teams(ctx context.Context, c *cluster.Cluster, team map[string]string) error {
	for ns, t := range team {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, freshness.DefaultTeamKey, t)
		if _, err := c.Client.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// printFreshness prints the freshness summary against version: the teams
// behind it and the exposure window (nodewise freshness's first line).
func printFreshness(ctx context.Context, c *cluster.Cluster, out io.Writer, version string) error {
	v, err := skew.ParseVersion(version)
	if err != nil {
		return err
	}
	r, err := freshness.Observe(ctx, c.Client, inventory.Options{}, freshness.Target{Version: v}, freshness.Keys{}, time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "   %s\n", r.Summary())
	return nil
}

// proxyVersions counts a namespace's running pods by sidecar image tag.
func proxyVersions(ctx context.Context, c *cluster.Cluster, ns string) (map[string]int, error) {
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, ct := range p.Spec.Containers {
			if ct.Name == "istio-proxy" {
				out[ct.Image[strings.LastIndex(ct.Image, ":")+1:]]++
			}
		}
	}
	return out, nil
}

// sidecarHalf moves the sample sidecar namespaces and an implicit one
// (adopted) from cfg.From's revision to cfg.To's in two waves, then starts
// a migration to the faulty sidecar revision, which the agents halt at its
// canary wave. istio installs a revision's istiod with the injector.
func sidecarHalf(ctx context.Context, c *cluster.Cluster, cfg Config, agents *judgegate.AgentConfig, istio func(version string) cluster.IstioOptions) (SidecarSummary, error) {
	var sum SidecarSummary
	out := cfg.Out
	from, _ := cluster.Revision(cfg.From)
	to, _ := cluster.Revision(cfg.To)
	faulty, _ := cluster.Revision(cfg.SidecarFaulty)
	step(out, "sidecar half: namespaces catalog and ledger (istio.io/rev=default) and legacy (istio-injection=enabled, the default revision implicitly) run %s sidecars", cfg.From)
	if err := legacyNamespace(ctx, c, "legacy"); err != nil {
		return sum, err
	}
	mc, stop, err := startMigrations(ctx, c, cfg.CRDDir, agents, cfg.Log, nil)
	if err != nil {
		return sum, err
	}
	defer stop()
	fmt.Fprintf(out, "   the RevisionMigration controller runs here, each wave judged by the node agents from outside the mesh:\n"+
		"   the migrated pods against the not-yet-migrated ones over the same %s soak, and each workload against its %s baseline\n", waveSoak, waveBaseline)
	if err := teams(ctx, c, map[string]string{"catalog": "storefront", "ledger": "payments", "legacy": "back-office"}); err != nil {
		return sum, err
	}
	if err := printFreshness(ctx, c, out, cfg.To); err != nil {
		return sum, err
	}
	time.Sleep(waveBaseline + 2*time.Second) // samples for the first wave's baseline

	step(out, "migrating them %s → %s through tag canary: wave canary (catalog), then the rest; legacy is adopted (its labels recorded, made explicit)", from, to)
	t0 := time.Now()
	healthy, err := runMigration(ctx, mc, canaryFirst("sidecar-"+to, from, to, "", "catalog"), out)
	if err != nil {
		return sum, err
	}
	sum.Healthy, sum.HealthyPhase = time.Since(t0), healthy.Status.Phase
	for _, ns := range healthy.Status.Namespaces {
		if ns.Adopted {
			sum.Adopted = append(sum.Adopted, ns.Name)
		}
	}
	if err := printProxies(ctx, c, out, "catalog", "ledger", "legacy"); err != nil {
		return sum, err
	}
	if err := printFreshness(ctx, c, out, cfg.To); err != nil {
		return sum, err
	}

	step(out, "installing revision %s (istiod %s, whose sidecar resets a quarter of connections), then migrating %s → %s through tag next", faulty, cfg.SidecarFaulty, to, faulty)
	if err := cluster.InstallIstio(ctx, c.Client, istio(cfg.SidecarFaulty)); err != nil {
		return sum, err
	}
	t0 = time.Now()
	bad, err := runMigration(ctx, mc, canaryFirst("sidecar-"+faulty, to, faulty, "next", "catalog"), out)
	if err != nil {
		return sum, err
	}
	sum.Faulty, sum.FaultyPhase, sum.HaltReason = time.Since(t0), bad.Status.Phase, bad.Status.Reason
	if bad.Status.Phase == v1alpha1.MigrationHalted && int(bad.Status.CurrentWave) < len(bad.Status.Waves) {
		sum.HaltedWave = bad.Status.Waves[bad.Status.CurrentWave].Name
	}
	if err := printProxies(ctx, c, out, "catalog", "ledger", "legacy"); err != nil {
		return sum, err
	}
	return sum, nil
}
