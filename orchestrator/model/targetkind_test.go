package model_test

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
	"github.com/nodewise/nodewise/orchestrator/nodestep"
)

func TestTypeTargetsByWhatTheyRun(t *testing.T) {
	ds := func(labels map[string]string, images ...string) *appsv1.DaemonSet {
		d := &appsv1.DaemonSet{}
		d.Spec.Template.ObjectMeta = metav1.ObjectMeta{Labels: labels}
		for _, img := range images {
			d.Spec.Template.Spec.Containers = append(d.Spec.Template.Spec.Containers, corev1.Container{Image: img})
		}
		return d
	}
	cluster := map[string]*appsv1.DaemonSet{
		"istio-system/ztunnel":        ds(map[string]string{"app": "ztunnel"}, "docker.io/istio/ztunnel:1.28.1"),
		"istio-system/istio-cni-node": ds(map[string]string{"k8s-app": "istio-cni-node"}, "docker.io/istio/install-cni:1.28.1"),
		"mesh/l4":                     ds(map[string]string{"proxy": "l4"}, "registry.example/mirror/ztunnel@sha256:abc"),
		"mesh/cni-backup":             ds(map[string]string{"app.kubernetes.io/name": "istio-cni"}),
		"mesh/node-exporter":          ds(map[string]string{"app": "node-exporter"}, "quay.io/prometheus/node-exporter:v1"),
	}
	get := func(ns, name string) (*appsv1.DaemonSet, error) { return cluster[ns+"/"+name], nil }
	ref := func(ns, name string, kind v1alpha1.TargetKind) v1alpha1.TargetRef {
		return v1alpha1.TargetRef{Namespace: ns, Name: name, Kind: kind}
	}
	cases := []struct {
		name    string
		targets []v1alpha1.TargetRef
		want    []v1alpha1.NodeState
		err     string
	}{
		{"chart labels", []v1alpha1.TargetRef{ref("istio-system", "istio-cni-node", ""), ref("istio-system", "ztunnel", "")}, []v1alpha1.NodeState{v1alpha1.NodeSwapCNI, v1alpha1.NodeSwapZtunnel}, ""},
		{"image, not the name", []v1alpha1.TargetRef{ref("mesh", "l4", "")}, []v1alpha1.NodeState{v1alpha1.NodeSwapZtunnel}, ""},
		{"a cni-named target typed by its labels", []v1alpha1.TargetRef{ref("mesh", "cni-backup", ""), ref("mesh", "l4", "")}, []v1alpha1.NodeState{v1alpha1.NodeSwapCNI, v1alpha1.NodeSwapZtunnel}, ""},
		{"explicit kind wins", []v1alpha1.TargetRef{ref("mesh", "node-exporter", v1alpha1.TargetCNI)}, []v1alpha1.NodeState{v1alpha1.NodeSwapCNI}, ""},
		{"cannot tell", []v1alpha1.TargetRef{ref("mesh", "node-exporter", "")}, nil, "cannot tell what DaemonSet mesh/node-exporter runs"},
		{"two of a kind", []v1alpha1.TargetRef{ref("istio-system", "istio-cni-node", ""), ref("mesh", "cni-backup", "")}, nil, "both cni targets"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := model.TypeTargets(model.Policy{Targets: tc.targets}, get)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want mention of %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for i, tr := range p.Targets {
				if got := nodestep.SwapState(tr); got != tc.want[i] {
					t.Errorf("target %s: step %s, want %s", tr.Name, got, tc.want[i])
				}
			}
		})
	}
}
