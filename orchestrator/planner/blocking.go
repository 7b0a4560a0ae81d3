package planner

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/orchestrator/model"
)

// BlockingPods maps each node a pod matching spec.blocking.podSelector runs
// on (bound, not finished, not being deleted) to the reason shown in its
// status. With several such pods the first by namespace/name is named, so
// the reason does not flap.
func BlockingPods(pods []*corev1.Pod, sel labels.Selector) map[string]string {
	if sel == nil {
		return nil
	}
	first := map[string]string{}
	for _, p := range pods {
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if !sel.Matches(labels.Set(p.Labels)) {
			continue
		}
		key := p.Namespace + "/" + p.Name
		if cur, ok := first[p.Spec.NodeName]; !ok || key < cur {
			first[p.Spec.NodeName] = key
		}
	}
	out := make(map[string]string, len(first))
	for node, pod := range first {
		out[node] = fmt.Sprintf("blocked by pod %s (spec.blocking.podSelector %s)", pod, sel)
	}
	return out
}

// FiringAlert is one alert Prometheus reports firing, by its labels.
type FiringAlert map[string]string

// AlertsBlock is why spec.blocking.alerts hold every start: the matching
// firing alerts, or the error reading them (fail closed). "" when nothing
// blocks.
func AlertsBlock(b model.Blocking, firing []FiringAlert, readErr error) string {
	if len(b.Alerts) == 0 {
		return ""
	}
	if readErr != nil {
		return fmt.Sprintf("blocking alerts cannot be read from %s, so they hold every start (fail closed): %v", b.Address, readErr)
	}
	var names []string
	for _, f := range firing {
		for _, a := range b.Alerts {
			if model.AlertMatches(a, f) {
				names = append(names, describeAlert(f))
				break
			}
		}
	}
	if len(names) == 0 {
		return ""
	}
	sort.Strings(names)
	names = compactStrings(names)
	return fmt.Sprintf("blocking alert(s) firing on %s: %s", b.Address, strings.Join(names, ", "))
}

// describeAlert is alertname{label="value",...}, its labels sorted.
func describeAlert(f FiringAlert) string {
	var ls []string
	for k, v := range f {
		if k != "alertname" {
			ls = append(ls, fmt.Sprintf("%s=%q", k, v))
		}
	}
	sort.Strings(ls)
	return f["alertname"] + "{" + strings.Join(ls, ",") + "}"
}

func compactStrings(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// blockedWaits: a pending node with a blocking pod on it does not start.
func blockedWaits(n model.NodeView) bool {
	return n.Blocked != "" && (n.State == "" || n.State == v1alpha1.NodePending)
}
