package nodeagent

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/nodewise/nodewise/bpf"
)

// TestDaemonSetIsLeastPrivilege checks deploy/nodeagent against what the
// agent is allowed: not privileged, CAP_BPF and CAP_PERFMON for the eBPF
// programs and, for the proof of enrollment (--mesh, docs/enrollment.md),
// CAP_SYS_PTRACE, CAP_SYS_ADMIN and CAP_NET_ADMIN, nothing else; a
// read-only root filesystem, RuntimeDefault seccomp, no hostPID.
func TestDaemonSetIsLeastPrivilege(t *testing.T) {
	b, err := os.ReadFile("../deploy/nodeagent/daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(b, &ds); err != nil {
		t.Fatalf("daemonset.yaml: %v", err)
	}
	spec := ds.Spec.Template.Spec
	if spec.HostPID || spec.HostIPC {
		t.Errorf("hostPID/hostIPC set: attribution does not need them")
	}
	if !spec.HostNetwork {
		t.Errorf("hostNetwork must be set: the agent excludes its own (the node's) namespace")
	}
	if sc := spec.SecurityContext; sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != "RuntimeDefault" {
		t.Errorf("pod seccomp profile is not RuntimeDefault")
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(spec.Containers))
	}
	c := spec.Containers[0].SecurityContext
	if c == nil || c.Privileged == nil || *c.Privileged || c.ReadOnlyRootFilesystem == nil || !*c.ReadOnlyRootFilesystem ||
		c.AllowPrivilegeEscalation == nil || *c.AllowPrivilegeEscalation {
		t.Errorf("container security context: %+v", c)
	}
	var add []string
	for _, a := range c.Capabilities.Add {
		add = append(add, string(a))
	}
	sort.Strings(add)
	const want = "BPF,NET_ADMIN,PERFMON,SYS_ADMIN,SYS_PTRACE"
	if strings.Join(add, ",") != want || len(c.Capabilities.Drop) != 1 || c.Capabilities.Drop[0] != "ALL" {
		t.Errorf("capabilities add %v drop %v, want add %s and drop ALL", add, c.Capabilities.Drop, want)
	}
	for _, m := range spec.Containers[0].VolumeMounts {
		if !m.ReadOnly {
			t.Errorf("volume %s is mounted writable", m.Name)
		}
	}
	// cgroups and /proc attribute sockets to pods; the CNI dirs and
	// istio-cni's run dir are read for istio-cni's health (its config,
	// kubeconfig and plugin). All of them read-only (above).
	allowed := map[string]bool{"/sys/fs/cgroup": true, "/proc": true, "/etc/cni/net.d": true, "/opt/cni/bin": true, "/var/run/istio-cni": true}
	for _, v := range spec.Volumes {
		if v.HostPath != nil && !allowed[v.HostPath.Path] {
			t.Errorf("unexpected hostPath %s", v.HostPath.Path)
		}
	}
}

// TestDashboardUsesExportedMetrics checks every nodewise_ metric the
// Grafana dashboard queries is one the agent exports.
func TestDashboardUsesExportedMetrics(t *testing.T) {
	b, err := os.ReadFile("../deploy/nodeagent/nodewise-node-health.json")
	if err != nil {
		t.Fatal(err)
	}
	fp := &fakeProbe{counters: map[bpf.Key]*bpf.Counters{{Netns: 1}: {}}}
	ra := startAgent(t, ModeEBPF, NewStaticResolver(map[uint32]Pod{1: {Namespace: "ns", Name: "p", UID: "u"}}), fakeLoaded(fp))
	mfs, err := ra.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, mf := range mfs {
		n := mf.GetName()
		exported[n] = true
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			exported[n+suffix] = true
		}
	}
	used := regexp.MustCompile(`nodewise_[a-z_]+`).FindAllString(string(b), -1)
	if len(used) == 0 {
		t.Fatal("dashboard queries no nodewise metric")
	}
	for _, m := range used {
		if !exported[m] {
			t.Errorf("dashboard queries %s, which the agent does not export", m)
		}
	}
}
