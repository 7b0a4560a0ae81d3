package chart

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// TestPrometheusEvaluatesTheAlertRules loads the chart's PrometheusRule into
// the pinned Prometheus (make tools) and waits until it has evaluated every
// rule: each must parse and run without error (health "ok"), so a broken
// PromQL expression fails here rather than in a user's Prometheus.
func TestPrometheusEvaluatesTheAlertRules(t *testing.T) {
	prom, err := Tool("prometheus")
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
	cfg := "global: {evaluation_interval: 1s}\nrule_files: [rules.yaml]\n"
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, prom, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr, "--log.level=warn")
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	defer func() { cancel(); <-exited }()

	want := 0
	groups, _ := rule.Object["spec"].(map[string]any)["groups"].([]any)
	for _, g := range groups {
		want += len(g.(map[string]any)["rules"].([]any))
	}
	deadline := time.Now().Add(time.Minute)
	var last string
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			b, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
			t.Fatalf("Prometheus exited (%v) loading the rules:\n%s", waitErr, b)
		default:
		}
		ok, msg := rulesHealthy(addr, want)
		if ok {
			return
		}
		last = msg
		time.Sleep(300 * time.Millisecond)
	}
	t.Fatalf("Prometheus did not evaluate all %d rules cleanly: %s", want, last)
}

// rulesHealthy asks Prometheus for its rules: all want of them loaded,
// evaluated at least once, each without error.
func rulesHealthy(addr string, want int) (bool, string) {
	resp, err := http.Get("http://" + addr + "/api/v1/rules")
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	var r struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name, Health, LastError string
					LastEvaluation          time.Time
				}
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return false, err.Error()
	}
	n := 0
	for _, g := range r.Data.Groups {
		for _, ru := range g.Rules {
			n++
			if ru.Health != "ok" {
				return false, fmt.Sprintf("rule %s: health %q, error %q", ru.Name, ru.Health, ru.LastError)
			}
			if ru.LastEvaluation.IsZero() || ru.LastEvaluation.Year() < 2000 {
				return false, "rule " + ru.Name + " not evaluated yet"
			}
		}
	}
	if n != want {
		return false, strconv.Itoa(n) + " rules loaded, want " + strconv.Itoa(want)
	}
	return true, ""
}
