package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/buildinfo"
	"github.com/nodewise/nodewise/leader"
)

const (
	// defaultInstallNamespace is where deploy/ installs nodewise.
	defaultInstallNamespace = "nodewise-system"
	// partOfSelector picks nodewise's own workloads (deploy/ labels them).
	partOfSelector = "app.kubernetes.io/part-of=nodewise"
	versionLabel   = "app.kubernetes.io/version"
)

// versionInfo is what `nodewise version` reports.
type versionInfo struct {
	Client     component   `json:"client"`
	Kubernetes string      `json:"kubernetes,omitempty"`
	Namespace  string      `json:"namespace,omitempty"`
	Server     []component `json:"server,omitempty"`
	// Running are the versions the running processes publish: each leader
	// Lease in the namespace with the build of the replica holding it.
	Running []leaderBuild `json:"running,omitempty"`
}

// leaderBuild is the build of the process that holds a leader Lease, from the
// Lease's nodewise.io/version annotation (leader.VersionAnnotation), which
// that process writes with every renewal.
type leaderBuild struct {
	Lease   string `json:"lease"`
	Holder  string `json:"holder"`
	Version string `json:"version"`
}

// component is one binary's version; for a workload, the version its
// app.kubernetes.io/version label or, without one, its image tag says.
type component struct {
	Name      string `json:"name"`
	Kind      string `json:"kind,omitempty"`
	Version   string `json:"version"`
	GoVersion string `json:"goVersion,omitempty"`
	Ready     string `json:"ready,omitempty"`
}

func newVersionCmd(g *globalFlags) *cobra.Command {
	var (
		clientOnly bool
		output     dataOutput
	)
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the CLI's version and, from the cluster, Kubernetes' and nodewise's (orchestrator, revisions controller, agents)",
		Long: "The server side is read from nodewise's workloads (label app.kubernetes.io/part-of=nodewise)\n" +
			"in -n (default nodewise-system): each one's image tag, else (an image pinned by digest only)\n" +
			"its app.kubernetes.io/version label; and from the running leaders: the build each process\n" +
			"holding a leader Lease there writes on it (annotation nodewise.io/version).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.check(); err != nil {
				return err
			}
			v := versionInfo{Client: component{Name: "nodewise", Version: buildinfo.Version(), GoVersion: runtime.Version()}}
			var serverErr error
			if !clientOnly {
				serverErr = serverVersions(cmd.Context(), g, &v)
			}
			if err := output.print(cmd.OutOrStdout(), v, v.names, func() error { return printVersion(cmd.OutOrStdout(), v, clientOnly) }); err != nil {
				return err
			}
			return serverErr
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "print the CLI's version only, without contacting the cluster")
	output.addFlag(cmd)
	return cmd
}

func serverVersions(ctx context.Context, g *globalFlags, v *versionInfo) error {
	kube, err := g.kube()
	if err != nil {
		return err
	}
	sv, err := kube.Discovery().ServerVersion()
	if err != nil {
		return fmt.Errorf("reading the server's version: %w", g.clarify(ctx, err))
	}
	v.Kubernetes = sv.GitVersion
	v.Namespace = g.namespace(defaultInstallNamespace)
	if v.Server, err = nodewiseWorkloads(ctx, kube, v.Namespace); err != nil {
		return err
	}
	v.Running, err = runningVersions(ctx, kube, v.Namespace)
	return err
}

// runningVersions reads the build each leader in ns publishes on its Lease.
// A Lease without a holder (released) says nothing of a running process.
func runningVersions(ctx context.Context, kube kubernetes.Interface, ns string) ([]leaderBuild, error) {
	leases, err := kube.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the leader Leases in %s: %w", ns, err)
	}
	var out []leaderBuild
	for _, l := range leases.Items {
		ver, ok := l.Annotations[leader.VersionAnnotation]
		if !ok || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			continue
		}
		out = append(out, leaderBuild{Lease: l.Name, Holder: *l.Spec.HolderIdentity, Version: ver})
	}
	return out, nil
}

// nodewiseWorkloads lists the Deployments and DaemonSets of nodewise in ns.
func nodewiseWorkloads(ctx context.Context, kube kubernetes.Interface, ns string) ([]component, error) {
	opts := metav1.ListOptions{LabelSelector: partOfSelector}
	deps, err := kube.AppsV1().Deployments(ns).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("listing nodewise's Deployments in %s: %w", ns, err)
	}
	dss, err := kube.AppsV1().DaemonSets(ns).List(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("listing nodewise's DaemonSets in %s: %w", ns, err)
	}
	var out []component
	for _, d := range deps.Items {
		out = append(out, component{Name: d.Name, Kind: "Deployment", Version: workloadVersion(d.Labels, d.Spec.Template.Spec),
			Ready: fmt.Sprintf("%d/%d", d.Status.ReadyReplicas, d.Status.Replicas)})
	}
	for _, d := range dss.Items {
		out = append(out, component{Name: d.Name, Kind: "DaemonSet", Version: workloadVersion(d.Labels, d.Spec.Template.Spec),
			Ready: fmt.Sprintf("%d/%d", d.Status.NumberReady, d.Status.DesiredNumberScheduled)})
	}
	return out, nil
}

// workloadVersion is what runs: the first container's image tag, which an
// image.tag override changes while the chart's version label stays; the
// label only when the image has no tag (pinned by digest alone).
func workloadVersion(labels map[string]string, pod corev1.PodSpec) string {
	for _, c := range pod.Containers {
		ref := c.Image
		if i := strings.LastIndex(ref, "@"); i >= 0 {
			ref = ref[:i]
		}
		if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
			return ref[i+1:]
		}
		break
	}
	if v := labels[versionLabel]; v != "" {
		return v
	}
	return "unknown"
}

// names are the workloads, as -o name prints them.
func (v versionInfo) names() []string {
	var out []string
	for _, c := range v.Server {
		out = append(out, strings.ToLower(c.Kind)+".apps/"+c.Name)
	}
	if len(out) == 0 {
		out = append(out, v.Client.Name)
	}
	return out
}

func printVersion(w io.Writer, v versionInfo, clientOnly bool) error {
	fmt.Fprintf(w, "Client: %s %s (%s)\n", v.Client.Name, v.Client.Version, v.Client.GoVersion)
	if clientOnly {
		return nil
	}
	if v.Kubernetes != "" {
		fmt.Fprintf(w, "Kubernetes: %s\n", v.Kubernetes)
	}
	if v.Namespace == "" {
		return nil
	}
	if len(v.Server) == 0 {
		_, err := fmt.Fprintf(w, "Server: nodewise is not installed in namespace %s (pass -n to look elsewhere)\n", v.Namespace)
		return err
	}
	for _, c := range v.Server {
		fmt.Fprintf(w, "Server: %s %s (%s %s/%s ready)\n", c.Name, c.Version, strings.ToLower(c.Kind), v.Namespace, c.Ready)
	}
	for _, r := range v.Running {
		fmt.Fprintf(w, "Running: %s %s (leader of Lease %s/%s)\n", r.Holder, r.Version, v.Namespace, r.Lease)
	}
	return nil
}
