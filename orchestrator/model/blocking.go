package model

import (
	"errors"
	"fmt"
	"net/url"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

// Blocking is spec.blocking parsed: what holds starts besides windows and
// other tools' locks (docs/maintenance.md).
type Blocking struct {
	// Pods selects the pods that block the node they run on (nil: none).
	Pods labels.Selector
	// Alerts block every start while one fires on Address's Prometheus.
	Alerts  []v1alpha1.BlockingAlert
	Address string
}

// parseBlocking validates spec.blocking, each problem naming its field.
func parseBlocking(b v1alpha1.BlockingSpec) (Blocking, []error) {
	var errs []error
	out := Blocking{Alerts: b.Alerts, Address: b.PrometheusAddress}
	if b.PodSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(b.PodSelector)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("spec.blocking.podSelector: %w", err))
		case sel.Empty():
			errs = append(errs, errors.New("spec.blocking.podSelector: an empty selector would match every pod and block every node; name a label"))
		default:
			out.Pods = sel
		}
	}
	for i, a := range b.Alerts {
		if a.Name == "" {
			errs = append(errs, fmt.Errorf("spec.blocking.alerts[%d].name: required", i))
		}
	}
	if len(b.Alerts) > 0 {
		u, err := url.Parse(b.PrometheusAddress)
		if b.PrometheusAddress == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("spec.blocking.prometheusAddress %q: blocking.alerts needs an http:// or https:// URL such as http://prometheus.monitoring.svc:9090", b.PrometheusAddress))
		}
	}
	return out, errs
}

// AlertMatches says whether a firing alert's labels (alertname included)
// match a, and so block starts.
func AlertMatches(a v1alpha1.BlockingAlert, alertLabels map[string]string) bool {
	if alertLabels["alertname"] != a.Name {
		return false
	}
	for k, v := range a.Labels {
		if alertLabels[k] != v {
			return false
		}
	}
	return true
}
