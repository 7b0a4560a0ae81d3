package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"k8s.io/kubectl/pkg/util/podutils"
	"k8s.io/utils/ptr"

	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/retry"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/dashboard"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/sim/cluster"
	"github.com/nodewise/nodewise/sim/dataplane"
	"github.com/nodewise/nodewise/sim/injector"
)

// DataPlane is what the demo needs of a live data plane: the simulated
// kubelet's container runtime, plus the traffic's own ground truth.
type DataPlane interface {
	cluster.Runtime
	// UseCluster lets the data plane read the API once the cluster is up
	// (and names its API server in istio-cni's kubeconfig).
	UseCluster(*cluster.Cluster)
	// Prefix names every network namespace the data plane creates.
	Prefix() string
	// Truth is the traffic's own ground truth so far (per pod, and in total).
	Truth() (map[string]dataplane.Truth, dataplane.Truth)
	// StartAgents starts a real node agent for each simulated node.
	StartAgents(context.Context, dataplane.AgentsConfig) (*dataplane.Agents, error)
	// Close stops every process and removes every namespace it created.
	Close() error
}

// Config configures a demo run. Zero values get the defaults below.
type Config struct {
	// Nodes and Zones shape the simulated cluster (default 12 nodes, 3 zones).
	Nodes, Zones int
	// From and To are the Istio versions of the healthy rollout (default 1.27.3 → 1.28.1).
	From, To string
	// FaultyTag is the ztunnel image tag of the faulty rollout (default
	// 1.28.2-rst with a live data plane, whose node agents and judge catch
	// its resets; 1.28.2-neverready without one).
	FaultyTag string
	// SidecarFaulty is the Istio version of the faulty sidecar revision the
	// sidecar half halts at its canary wave (default 1.29.0-rst: its proxy
	// resets a quarter of connections). The sidecar half runs with a live
	// data plane only: its judge is the node agents.
	SidecarFaulty string
	// AgentPort is where the node agents listen on their node's InternalIP
	// (default 9443, as the orchestrator's --agent-port).
	AgentPort int
	// WorkDir holds the cluster's state; empty means a new temporary directory,
	// removed at the end.
	WorkDir string
	// CRDDir holds the CRDs (default: FindCRDDir).
	CRDDir string
	// BinDir holds etcd and the Kubernetes binaries (empty: the cluster package searches).
	BinDir string
	// DataPlane, when set, runs the pods' containers (live traffic); nil runs none.
	DataPlane DataPlane
	// Out receives the progress view and the summary (default os.Stdout).
	Out io.Writer
	// Redraw redraws the node table in place (for a terminal) instead of printing changes.
	Redraw bool
	// Log receives the components' logs (default: discarded).
	Log *zap.Logger
	// DashboardAddress is where the demo serves the dashboard (default
	// dashboard.DefaultAddress; a free loopback port when that is taken).
	DashboardAddress string
}

func (c *Config) validate() error {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	if c.Nodes == 0 {
		c.Nodes = 12
	}
	if c.Zones == 0 {
		c.Zones = 3
	}
	def(&c.From, "1.27.3")
	def(&c.To, "1.28.1")
	if c.DataPlane != nil {
		def(&c.FaultyTag, "1.28.2-rst")
	}
	def(&c.FaultyTag, "1.28.2"+cluster.TagNeverReady)
	def(&c.SidecarFaulty, "1.29.0-rst")
	def(&c.DashboardAddress, dashboard.DefaultAddress)
	if c.Out == nil {
		c.Out = os.Stdout
	}
	if c.Log == nil {
		c.Log = zap.NewNop()
	}
	revs := map[string]string{}
	for name, v := range map[string]string{"From": c.From, "To": c.To, "SidecarFaulty": c.SidecarFaulty} {
		rev, err := cluster.Revision(v)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if other, ok := revs[rev]; ok {
			return fmt.Errorf("%s and %s are both revision %s: the sidecar half needs three revisions", other, name, rev)
		}
		revs[rev] = name
	}
	if c.CRDDir == "" {
		dir, err := FindCRDDir()
		if err != nil {
			return err
		}
		c.CRDDir = dir
	}
	return nil
}

// Summary is what a demo run measured.
type Summary struct {
	ClusterUp, Healthy, Faulty, Total time.Duration
	HealthyPhase, FaultyPhase         v1alpha1.RolloutPhase
	HaltReason, HaltedNode            string
	DataPlane                         string
	// HealthyTruth and FaultyTruth are the traffic's ground truth during
	// each rollout (live data plane only).
	HealthyTruth, FaultyTruth dataplane.Truth
	// Sidecar is the sidecar half (live data plane only; zero without).
	Sidecar SidecarSummary
}

// SidecarSummary is what the sidecar half measured.
type SidecarSummary struct {
	Healthy, Faulty           time.Duration
	HealthyPhase, FaultyPhase v1alpha1.MigrationPhase
	// Adopted are the namespaces the healthy migration made explicit.
	Adopted []string
	// HaltedWave and HaltReason say where and why the faulty one halted.
	HaltedWave, HaltReason string
}

// Run runs the demo until it finishes or ctx ends (Ctrl-C); either way it
// stops everything it started before returning.
func Run(ctx context.Context, cfg Config) (sum Summary, err error) {
	if err := cfg.validate(); err != nil {
		return sum, err
	}
	start := time.Now()
	out := cfg.Out
	dir, cleanupDir, err := workDir(cfg.WorkDir)
	if err != nil {
		return sum, err
	}
	defer cleanupDir()
	if cfg.DataPlane != nil {
		defer func() {
			if cerr := cfg.DataPlane.Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("cleaning up the data plane: %w", cerr))
			}
		}()
	}

	step(out, "starting the simulated cluster: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, %d nodes in %d zones", cfg.Nodes, cfg.Zones)
	opts := cluster.Options{Nodes: cfg.Nodes, Zones: cfg.Zones, ReadyDelay: 300 * time.Millisecond, BinDir: cfg.BinDir, Log: cfg.Log.Named("kubelet")}
	if cfg.DataPlane != nil {
		opts.Runtime = cfg.DataPlane
	}
	upCtx, cancelUp := context.WithTimeout(ctx, 4*time.Minute)
	c, err := cluster.Up(upCtx, dir, opts)
	cancelUp()
	if err != nil {
		return sum, fmt.Errorf("starting the simulated cluster: %w", err)
	}
	defer c.Stop()
	var agents *dataplane.Agents
	if cfg.DataPlane != nil {
		cfg.DataPlane.UseCluster(c)
		fmt.Fprintf(out, "   live data plane: pod namespaces /run/netns/%s-*, one ztunnel stand-in process per node, traffic between the ambient pods\n", cfg.DataPlane.Prefix())
		if agents, err = startAgents(ctx, cfg.DataPlane, c, filepath.Join(filepath.Dir(dir), "agents"), cfg.AgentPort, cfg.Log.Named("agent")); err != nil {
			return sum, err
		}
		defer agents.Close()
		fmt.Fprintf(out, "   node agents: one per node (eBPF), each on its node's InternalIP:%d, TLS with a test CA and a bearer token\n", agents.Port)
	}
	sum.ClusterUp = time.Since(start)
	fmt.Fprintf(out, "   cluster ready in %s. Look around while the demo runs:\n     export KUBECONFIG=%s\n     kubectl get nodes,pods -A -o wide; kubectl get noderollouts\n",
		sum.ClusterUp.Round(100*time.Millisecond), c.Kubeconfig)

	// With the live data plane, a sidecar injector for every revision: the
	// sample sidecar namespaces get proxies, each a stand-in in its pod.
	var inj *injector.Server
	if agents != nil {
		if inj, err = injector.Start(); err != nil {
			return sum, err
		}
		defer inj.Close()
		for _, v := range []string{cfg.From, cfg.To, cfg.SidecarFaulty} {
			rev, _ := cluster.Revision(v)
			inj.SetRevision(rev, v)
		}
	}
	istio := func(version string, samples bool) cluster.IstioOptions {
		o := cluster.IstioOptions{Version: version, UpdateStrategy: appsv1.OnDeleteDaemonSetStrategyType, SkipSamples: !samples}
		if inj != nil {
			o.InjectorURL, o.CABundle = inj.URL, inj.CABundle
		}
		return o
	}
	step(out, "installing the NodeRollout CRD and Istio %s (ztunnel and istio-cni with updateStrategy OnDelete, sample apps)", cfg.From)
	if err := cluster.InstallCRD(ctx, c.Config, filepath.Join(cfg.CRDDir, filepath.Base(crdFile))); err != nil {
		return sum, err
	}
	if err := cluster.InstallIstio(ctx, c.Client, istio(cfg.From, true)); err != nil {
		return sum, err
	}
	if err := waitDaemonSets(ctx, c, cfg.Nodes); err != nil {
		return sum, err
	}
	if cfg.DataPlane != nil {
		step(out, "installing the nodewise-probe DaemonSet (deploy/probe, --rate=%g): the real probe on every node, through its ztunnel both ways, drained or not", demoProbe.Rate)
		if err := installProbe(ctx, c.Client, cfg.Nodes, demoProbe); err != nil {
			return sum, err
		}
	}

	if agents != nil {
		step(out, "starting the orchestrator (in this process, leader election on a Lease), each node gated by the judge over its node agent")
	} else {
		step(out, "starting the orchestrator (in this process, leader election on a Lease), nodes gated on readiness (no agents without the live data plane)")
	}
	stopOrch, err := startOrchestrator(ctx, c, cfg.Log.Named("orchestrator"), agentConfig(agents), model.SwapSurge)
	if err != nil {
		return sum, err
	}
	defer stopOrch()
	nwc, err := v1alpha1.NewForConfig(c.Config)
	if err != nil {
		return sum, err
	}
	rc := nwc.NodeRollouts()
	stopDashboard, err := startDashboard(ctx, nwc, c.Client, agentConfig(agents), cfg.DashboardAddress, out, cfg.Log.Named("dashboard"))
	if err != nil {
		return sum, err
	}
	defer stopDashboard()
	if err := waitSamples(ctx, c); err != nil {
		return sum, err
	}

	step(out, "upgrading the charts to %s (OnDelete: no pod changes yet), then applying NodeRollout %q with drain auto", cfg.To, "upgrade-"+cfg.To)
	fmt.Fprintf(out, "   swaps: istio-cni replace (delete, the DaemonSet recreates it); ztunnel surge (make-before-break, the default:\n"+
		"   a new ztunnel is Ready beside the old one on each node before the old one goes, then the DaemonSet adopts it)\n")
	if err := cluster.InstallIstio(ctx, c.Client, istio(cfg.To, false)); err != nil {
		return sum, err
	}
	if err := waitTemplateObserved(ctx, c, cluster.CNIName, cluster.ZtunnelName); err != nil {
		return sum, err
	}
	t0, truth0 := time.Now(), truthOf(cfg.DataPlane)
	healthy, err := runRollout(ctx, rc, demoHealthyRollout("upgrade-"+cfg.To, c.Nodes[0].Name, agents != nil), newView(out, cfg.Redraw))
	if err != nil {
		return sum, err
	}
	sum.Healthy, sum.HealthyPhase = time.Since(t0), healthy.Status.Phase
	truth1 := truthOf(cfg.DataPlane)
	sum.HealthyTruth = truth1.Sub(truth0)
	fmt.Fprintf(out, "   rollout %s: %s in %s\n", healthy.Name, healthy.Status.Phase, sum.Healthy.Round(time.Second))

	canary := c.Nodes[len(c.Nodes)/2].Name
	judgeRst := agents != nil && strings.HasSuffix(cfg.FaultyTag, "-rst")
	step(out, "rolling ztunnel to the faulty build %s with canary %s: it %s", cfg.FaultyTag, canary, faultyExpectation(cfg.FaultyTag))
	if err := cluster.SetImageTag(ctx, c.Client, cluster.ZtunnelName, cfg.FaultyTag); err != nil {
		return sum, err
	}
	if err := waitTemplateObserved(ctx, c, cluster.ZtunnelName); err != nil {
		return sum, err
	}
	t0 = time.Now()
	fr := faultyRollout("faulty-"+cfg.FaultyTag, canary, judgeRst)
	if judgeRst {
		// Drained: the canary's soak has only the probe's traffic, and
		// the build is judged on it before any workload lands there.
		fr.Spec.Drain.Policy = v1alpha1.DrainAlways
	}
	faulty, err := runRollout(ctx, rc, fr, newView(out, cfg.Redraw))
	if err != nil {
		return sum, err
	}
	sum.Faulty, sum.FaultyPhase, sum.HaltReason = time.Since(t0), faulty.Status.Phase, faulty.Status.HaltReason
	for _, n := range faulty.Status.Nodes {
		if n.State == v1alpha1.NodeFailed {
			sum.HaltedNode = n.Name
		}
	}
	if cfg.DataPlane != nil {
		total := truthOf(cfg.DataPlane)
		sum.FaultyTruth, sum.DataPlane = total.Sub(truth1), total.String()
	}
	if agents != nil {
		if sum.Sidecar, err = sidecarHalf(ctx, c, cfg, agentConfig(agents), func(v string) cluster.IstioOptions { return istio(v, false) }); err != nil {
			return sum, err
		}
	}
	sum.Total = time.Since(start)
	printSummary(out, sum, cfg)
	return sum, nil
}

// demoProbe is the demo's probe traffic: lighter than the tests' (twelve
// nodes share the machine), still enough to judge a drained node in 10 s.
var demoProbe = ProbeTraffic{Rate: 5, Streams: 1, StreamEvery: time.Second}

// truthOf is the data plane's ground truth so far (zero without one).
func truthOf(dp DataPlane) dataplane.Truth {
	if dp == nil {
		return dataplane.Truth{}
	}
	_, t := dp.Truth()
	return t
}

func faultyExpectation(tag string) string {
	switch {
	case strings.HasSuffix(tag, cluster.TagNeverReady):
		return "never gets Ready, so the canary's swap timeout halts the rollout"
	case strings.HasSuffix(tag, "-rst"):
		return "resets a share of connections; the canary is drained (drain always), so only its nodewise-probe pod has traffic in the soak, and the judge fails its gate on the probe's resets and halts the rollout before the uncordon"
	}
	return "should halt at the canary"
}

func step(out io.Writer, format string, args ...any) {
	fmt.Fprintf(out, "\n==> %s  "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// workDir returns the cluster's state directory and what removes it.
func workDir(dir string) (string, func(), error) {
	if dir != "" {
		return filepath.Join(dir, "sim"), func() {}, nil
	}
	tmp, err := os.MkdirTemp("", "nodewise-demo-")
	if err != nil {
		return "", nil, err
	}
	return filepath.Join(tmp, "sim"), func() { _ = os.RemoveAll(tmp) }, nil
}

// waitDaemonSets waits until every node has a Ready, running ztunnel and
// istio-cni pod. It counts pods rather than trusting the DaemonSet status,
// which the controller may update late on a loaded machine.
func waitDaemonSets(ctx context.Context, c *cluster.Cluster, nodes int) error {
	pods := c.Client.CoreV1().Pods(cluster.IstioNamespace)
	sels := map[string]labels.Selector{"ztunnel": labels.SelectorFromSet(labels.Set{"app": "ztunnel"}), cluster.CNIName: labels.SelectorFromSet(labels.Set{"k8s-app": cluster.CNIName})}
	err := waitList(ctx, 3*time.Minute, cluster.ListWatch(pods.List, pods.Watch, metav1.ListOptions{}), &corev1.Pod{}, func(objs []any) (bool, string) {
		var short []string
		for _, name := range []string{"ztunnel", cluster.CNIName} {
			if n := len(readyNodes(objs, sels[name])); n != nodes {
				short = append(short, fmt.Sprintf("%s Ready on %d", name, n))
			}
		}
		return len(short) == 0, strings.Join(short, ", ")
	})
	if err != nil {
		return fmt.Errorf("waiting for ztunnel and istio-cni to be Ready on %d nodes: %w", nodes, err)
	}
	return nil
}

// readyNodes are the nodes with a Ready pod among pods matching selector.
func readyNodes(pods []any, selector labels.Selector) map[string]bool {
	ready := map[string]bool{}
	for _, o := range pods {
		p, ok := o.(*corev1.Pod)
		if ok && p.DeletionTimestamp == nil && selector.Matches(labels.Set(p.Labels)) && podutils.IsPodReady(p) {
			ready[p.Spec.NodeName] = true
		}
	}
	return ready
}

// waitTemplateObserved waits until the DaemonSet controller has seen each
// DaemonSet's new template (its newest ControllerRevision exists), so a
// rollout applied next finds the nodes out of date.
func waitTemplateObserved(ctx context.Context, c *cluster.Cluster, names ...string) error {
	dss := c.Client.AppsV1().DaemonSets(cluster.IstioNamespace)
	err := waitList(ctx, time.Minute, cluster.ListWatch(dss.List, dss.Watch, metav1.ListOptions{}), &appsv1.DaemonSet{}, func(objs []any) (bool, string) {
		seen := map[string]*appsv1.DaemonSet{}
		for _, o := range objs {
			if ds, ok := o.(*appsv1.DaemonSet); ok {
				seen[ds.Name] = ds
			}
		}
		for _, name := range names {
			ds := seen[name]
			if ds == nil {
				return false, name + " not found"
			}
			if ds.Status.ObservedGeneration != ds.Generation || ds.Status.UpdatedNumberScheduled >= ds.Status.DesiredNumberScheduled {
				return false, fmt.Sprintf("%s: generation %d observed %d, %d of %d updated", name, ds.Generation, ds.Status.ObservedGeneration, ds.Status.UpdatedNumberScheduled, ds.Status.DesiredNumberScheduled)
			}
		}
		return true, ""
	})
	if err != nil {
		return fmt.Errorf("waiting for the DaemonSet controller to observe the new templates of %v: %w", names, err)
	}
	return nil
}

// waitSamples waits until every sample Deployment has its replicas available.
func waitSamples(ctx context.Context, c *cluster.Cluster) error {
	deps := c.Client.AppsV1().Deployments(metav1.NamespaceAll)
	err := waitList(ctx, 3*time.Minute, cluster.ListWatch(deps.List, deps.Watch, metav1.ListOptions{}), &appsv1.Deployment{}, func(objs []any) (bool, string) {
		var waiting []string
		for _, o := range objs {
			d, ok := o.(*appsv1.Deployment)
			if !ok || d.Namespace == cluster.IstioNamespace {
				continue
			}
			if want := ptr.Deref(d.Spec.Replicas, 0); d.Spec.Replicas == nil || d.Status.AvailableReplicas != want {
				waiting = append(waiting, fmt.Sprintf("%s/%s %d/%d available", d.Namespace, d.Name, d.Status.AvailableReplicas, want))
			}
		}
		sort.Strings(waiting)
		return len(waiting) == 0, strings.Join(waiting, ", ")
	})
	if err != nil {
		return fmt.Errorf("waiting for the sample apps: %w", err)
	}
	return nil
}

// setZtunnelGrace sets the ztunnel template's termination grace period and
// the TERMINATION_GRACE_PERIOD_SECONDS it passes to the process (tests use a
// short one so the drain deadline comes sooner).
func setZtunnelGrace(ctx context.Context, c *cluster.Cluster, seconds int64) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		api := c.Client.AppsV1().DaemonSets(cluster.IstioNamespace)
		ds, err := api.Get(ctx, cluster.ZtunnelName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ds.Spec.Template.Spec.TerminationGracePeriodSeconds = &seconds
		for i := range ds.Spec.Template.Spec.Containers {
			env := ds.Spec.Template.Spec.Containers[i].Env
			for j := range env {
				if env[j].Name == "TERMINATION_GRACE_PERIOD_SECONDS" {
					env[j].Value = fmt.Sprint(seconds)
				}
			}
		}
		_, err = api.Update(ctx, ds, metav1.UpdateOptions{})
		return err
	})
}
