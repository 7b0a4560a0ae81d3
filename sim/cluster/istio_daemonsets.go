package cluster

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// IstioGracePeriodSeconds is both charts' terminationGracePeriodSeconds.
const IstioGracePeriodSeconds = 30

// nodeAgentTolerations let a DaemonSet run on every node, as Istio's do.
var nodeAgentTolerations = []corev1.Toleration{
	{Effect: corev1.TaintEffectNoSchedule, Operator: corev1.TolerationOpExists},
	{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists},
	{Effect: corev1.TaintEffectNoExecute, Operator: corev1.TolerationOpExists},
}

func strategy(opts IstioOptions, rolling appsv1.RollingUpdateDaemonSet) appsv1.DaemonSetUpdateStrategy {
	if opts.UpdateStrategy == appsv1.RollingUpdateDaemonSetStrategyType {
		return appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType, RollingUpdate: &rolling}
	}
	return appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
}

func fieldEnv(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
}

// ztunnelDaemonSet is shaped like Istio's ztunnel chart: labels, ports,
// readiness on 15021, a 30 s grace period passed to the process as
// TERMINATION_GRACE_PERIOD_SECONDS, and system-node-critical priority.
func ztunnelDaemonSet(opts IstioOptions, rev string) *appsv1.DaemonSet {
	labels := map[string]string{
		"app": "ztunnel", "app.kubernetes.io/name": "ztunnel", "app.kubernetes.io/part-of": "istio",
		"app.kubernetes.io/version": opts.Version, "istio.io/rev": rev,
		"sidecar.istio.io/inject": "false", "istio.io/dataplane-mode": "none",
	}
	grace := int64(IstioGracePeriodSeconds)
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: ZtunnelName, Namespace: IstioNamespace, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "ztunnel"}},
			UpdateStrategy: strategy(opts, appsv1.RollingUpdateDaemonSet{
				MaxSurge: ptrTo(intstr.FromInt32(1)), MaxUnavailable: ptrTo(intstr.FromInt32(0))}),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{
					"sidecar.istio.io/inject": "false", "prometheus.io/port": "15020", "prometheus.io/scrape": "true"}},
				Spec: corev1.PodSpec{
					ServiceAccountName:            "ztunnel",
					PriorityClassName:             "system-node-critical",
					TerminationGracePeriodSeconds: &grace,
					NodeSelector:                  map[string]string{"kubernetes.io/os": "linux"},
					Tolerations:                   nodeAgentTolerations,
					Containers: []corev1.Container{{
						Name:  "istio-proxy",
						Image: "docker.io/istio/ztunnel:" + opts.Version,
						Args:  []string{"proxy", "ztunnel"},
						Ports: []corev1.ContainerPort{
							{Name: "ztunnel-stats", ContainerPort: 15020, Protocol: corev1.ProtocolTCP},
						},
						Env: []corev1.EnvVar{
							{Name: "CA_ADDRESS", Value: fmt.Sprintf("istiod-%s.%s.svc:15012", rev, IstioNamespace)},
							{Name: "XDS_ADDRESS", Value: fmt.Sprintf("istiod-%s.%s.svc:15012", rev, IstioNamespace)},
							{Name: "RUST_LOG", Value: "info"},
							{Name: "ISTIO_META_CLUSTER_ID", Value: "Kubernetes"},
							{Name: "INPOD_ENABLED", Value: "true"},
							{Name: "TERMINATION_GRACE_PERIOD_SECONDS", Value: fmt.Sprint(IstioGracePeriodSeconds)},
							fieldEnv("POD_NAME", "metadata.name"), fieldEnv("POD_NAMESPACE", "metadata.namespace"),
							fieldEnv("NODE_NAME", "spec.nodeName"), fieldEnv("INSTANCE_IP", "status.podIP"),
							fieldEnv("SERVICE_ACCOUNT", "spec.serviceAccountName"),
						},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
							Path: "/healthz/ready", Port: intstr.FromInt32(15021)}}},
						SecurityContext: &corev1.SecurityContext{
							Privileged: ptrTo(false),
							Capabilities: &corev1.Capabilities{
								Add: []corev1.Capability{"NET_ADMIN", "SYS_ADMIN", "NET_RAW"}, Drop: []corev1.Capability{"ALL"}},
						},
					}},
				},
			},
		},
	}
}

// cniDaemonSet is shaped like Istio's istio-cni chart: host network, the
// install-cni container with readiness on 8000, system-node-critical.
func cniDaemonSet(opts IstioOptions, rev string) *appsv1.DaemonSet {
	labels := map[string]string{
		"k8s-app": "istio-cni-node", "app.kubernetes.io/name": "istio-cni", "app.kubernetes.io/part-of": "istio",
		"app.kubernetes.io/version": opts.Version, "istio.io/rev": rev,
		"sidecar.istio.io/inject": "false", "istio.io/dataplane-mode": "none",
	}
	grace := int64(IstioGracePeriodSeconds)
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: CNIName, Namespace: IstioNamespace, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": "istio-cni-node"}},
			UpdateStrategy: strategy(opts, appsv1.RollingUpdateDaemonSet{
				MaxUnavailable: ptrTo(intstr.FromInt32(1))}),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{
					"sidecar.istio.io/inject": "false", "prometheus.io/port": "15014", "prometheus.io/scrape": "true"}},
				Spec: corev1.PodSpec{
					ServiceAccountName:            "istio-cni",
					PriorityClassName:             "system-node-critical",
					TerminationGracePeriodSeconds: &grace,
					HostNetwork:                   true,
					NodeSelector:                  map[string]string{"kubernetes.io/os": "linux"},
					Tolerations:                   nodeAgentTolerations,
					Containers: []corev1.Container{{
						Name:    "install-cni",
						Image:   "docker.io/istio/install-cni:" + opts.Version,
						Command: []string{"install-cni"},
						Args:    []string{"--log_output_level=info"},
						Ports:   []corev1.ContainerPort{{Name: "metrics", ContainerPort: 15014, Protocol: corev1.ProtocolTCP}},
						Env: []corev1.EnvVar{
							{Name: "REPAIR_ENABLED", Value: "true"},
							{Name: "AMBIENT_ENABLED", Value: "true"},
							fieldEnv("NODE_NAME", "spec.nodeName"), fieldEnv("POD_NAME", "metadata.name"),
							fieldEnv("POD_NAMESPACE", "metadata.namespace"),
						},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
							Path: "/readyz", Port: intstr.FromInt32(8000)}}},
						SecurityContext: &corev1.SecurityContext{
							Privileged: ptrTo(true),
						},
					}},
				},
			},
		},
	}
}
