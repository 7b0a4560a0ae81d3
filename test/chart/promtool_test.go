package chart

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// TestHaltedAlertsStayFiring unit-tests the chart's alert rules with the
// pinned promtool (make tools): a NodeRollout and a RevisionMigration halted
// for an hour keep NodewiseRolloutHalted and NodewiseMigrationHalted firing
// the whole hour (the old increase(...[15m]) resolved itself after 15
// minutes), stop once resumed, and every message names the cluster (here
// Prometheus' external label cluster, the default).
func TestHaltedAlertsStayFiring(t *testing.T) {
	promtool, err := Tool("promtool")
	if err != nil {
		t.Fatal(err)
	}
	objs := render(t, "monitoring.prometheusRule.enabled=true")
	rule := objs["PrometheusRule "+Namespace+"/nodewise"]
	if rule == nil {
		t.Fatal("no PrometheusRule rendered")
	}
	dir := t.TempDir()
	spec, err := yaml.Marshal(rule.Object["spec"])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), spec, 0o600); err != nil {
		t.Fatal(err)
	}
	// The annotations promtool must produce: the rule's templates with the
	// labels and the external label filled in.
	expand := func(alert, label, value string) map[string]string {
		out := map[string]string{}
		for k, v := range ruleAnnotations(t, rule, alert) {
			v = strings.ReplaceAll(v, "{{ $externalLabels.cluster }}", "prod-eu")
			out[k] = strings.ReplaceAll(v, "{{ $labels."+label+" }}", value)
		}
		if !strings.HasPrefix(out["summary"], "[prod-eu] ") || !strings.HasPrefix(out["description"], "[prod-eu] ") {
			t.Fatalf("%s does not name the cluster first: %v", alert, out)
		}
		return out
	}
	type alert struct {
		Labels      map[string]string `json:"exp_labels"`
		Annotations map[string]string `json:"exp_annotations"`
	}
	firing := func(kind, label, value string) []alert {
		return []alert{{Labels: map[string]string{"severity": "warning", label: value}, Annotations: expand(kind, label, value)}}
	}
	type evalCase struct {
		At     string  `json:"eval_time"`
		Alert  string  `json:"alertname"`
		Alerts []alert `json:"exp_alerts"`
	}
	var cases []evalCase
	// Halted from minute 1 to minute 61, then resumed.
	for _, at := range []string{"2m", "16m", "31m", "61m"} {
		cases = append(cases,
			evalCase{At: at, Alert: "NodewiseRolloutHalted", Alerts: firing("NodewiseRolloutHalted", "rollout", "mesh")},
			evalCase{At: at, Alert: "NodewiseMigrationHalted", Alerts: firing("NodewiseMigrationHalted", "migration", "to-1-28")})
	}
	for _, at := range []string{"0m", "75m"} {
		cases = append(cases, evalCase{At: at, Alert: "NodewiseRolloutHalted", Alerts: []alert{}}, evalCase{At: at, Alert: "NodewiseMigrationHalted", Alerts: []alert{}})
	}
	test := map[string]any{
		"rule_files":          []string{"rules.yaml"},
		"evaluation_interval": "1m",
		"tests": []any{map[string]any{
			"interval":        "1m",
			"external_labels": map[string]string{"cluster": "prod-eu"},
			"input_series": []any{
				map[string]string{"series": `nodewise_rollout_halted{rollout="mesh"}`, "values": "0 1x60 0x30"},
				map[string]string{"series": `nodewise_migration_halted{migration="to-1-28"}`, "values": "0 1x60 0x30"},
				// The counter the old rule used: one halt at minute 1, then flat.
				map[string]string{"series": `nodewise_rollout_halts_total{reason="gate_failed"}`, "values": "0 1x90"},
			},
			"alert_rule_test": cases,
		}},
	}
	b, err := yaml.Marshal(test)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "test.yaml"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := exec.Command(promtool, "test", "rules", "test.yaml")
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s\n--- test.yaml:\n%s", err, out.String(), b)
	}
	if !strings.Contains(out.String(), "SUCCESS") {
		t.Fatalf("promtool test rules did not report SUCCESS:\n%s", out.String())
	}
	// monitoring.prometheusRule.cluster names the cluster instead.
	named := render(t, "monitoring.prometheusRule.enabled=true", "monitoring.prometheusRule.cluster=prod-us")
	if s := ruleAnnotations(t, named["PrometheusRule "+Namespace+"/nodewise"], "NodewiseNodeFailed")["summary"]; !strings.HasPrefix(s, "[prod-us] ") {
		t.Errorf("monitoring.prometheusRule.cluster=prod-us: summary %q", s)
	}
}

// ruleAnnotations are the annotations of the rendered rule alert.
func ruleAnnotations(t *testing.T, rule *unstructured.Unstructured, alert string) map[string]string {
	t.Helper()
	groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups")
	for _, g := range groups {
		rules, _ := g.(map[string]any)["rules"].([]any)
		for _, r := range rules {
			m := r.(map[string]any)
			if m["alert"] != alert {
				continue
			}
			out := map[string]string{}
			for k, v := range m["annotations"].(map[string]any) {
				out[k] = fmt.Sprint(v)
			}
			return out
		}
	}
	t.Fatalf("no alert %s in the PrometheusRule", alert)
	return nil
}
