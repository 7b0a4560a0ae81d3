package crds

import (
	"fmt"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

func object(t *testing.T, s string) map[string]any {
	t.Helper()
	obj := map[string]any{}
	if err := yaml.Unmarshal([]byte(s), &obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

// The offline check refuses what the API server refuses (test/e2e compares
// the two on the real server): names, enums, minimums, sets and CEL rules.
func TestNodeRolloutValidation(t *testing.T) {
	v, err := ForKind("NodeRollout")
	if err != nil {
		t.Fatal(err)
	}
	const good = "apiVersion: nodewise.io/v1alpha1\nkind: NodeRollout\nmetadata: {name: up}\nspec: {maxParallel: 2}\n"
	obj := object(t, good)
	if errs := v.Validate(t.Context(), obj); len(errs) != 0 {
		t.Fatalf("a good rollout: %v", errs)
	}
	spec := obj["spec"].(map[string]any)
	if spec["maxUnavailable"] != int64(1) && spec["maxUnavailable"] != float64(1) {
		t.Errorf("defaults not applied: maxUnavailable %v", spec["maxUnavailable"])
	}
	if errs := v.Validate(t.Context(), object(t, strings.Replace(good, "maxParallel: 2", "maxParallel: '10%', maxUnavailable: '5%'", 1))); len(errs) != 0 {
		t.Fatalf("percentages: %v", errs)
	}
	overnight := strings.Replace(good, "maxParallel: 2", "maintenanceWindows: [{start: '22:00', end: '04:00', timeZone: Europe/Berlin}], blackouts: [{start: '2026-12-24T00:00', end: '2026-12-27T00:00', timeZone: Europe/Berlin, reason: holidays}], notBefore: '2026-12-01T22:00:00Z'", 1)
	if errs := v.Validate(t.Context(), object(t, overnight)); len(errs) != 0 {
		t.Fatalf("an overnight window, a blackout and notBefore: %v", errs)
	}
	for _, tc := range []struct{ in, want string }{
		{strings.Replace(good, "name: up", "name: Up_Grade", 1), "metadata.name"},
		{strings.Replace(good, "name: up", "name: ''", 1), "metadata.name"},
		{strings.Replace(good, "maxParallel: 2", "maxParallel: 0", 1), "spec.maxParallel"},
		{strings.Replace(good, "maxParallel: 2", "maxParallel: '0%'", 1), "spec.maxParallel"},
		{strings.Replace(good, "maxParallel: 2", "maxUnavailable: '150%'", 1), "spec.maxUnavailable"},
		{strings.Replace(good, "maxParallel: 2", "maxUnavailable: ten", 1), "spec.maxUnavailable"},
		{strings.Replace(good, "maxParallel: 2", "canaryNodes: [n1, n2, n1]", 1), `spec.canaryNodes[2]: Duplicate value: "n1"`},
		{strings.Replace(good, "maxParallel: 2", "drain: {policy: sometimes}", 1), "spec.drain.policy"},
		{strings.Replace(good, "maxParallel: 2", "maintenanceWindows: [{start: '10:00', end: '10:00'}]", 1), "window end must differ from its start"},
		{strings.Replace(good, "maxParallel: 2", "blackouts: [{start: '2026-12-24T10:00', end: '2026-12-24T09:00'}]", 1), "blackout end must be after its start"},
		{strings.Replace(good, "maxParallel: 2", "blackouts: [{start: '2026-12-24', end: '2026-12-25T09:00'}]", 1), "spec.blackouts[0].start"},
		{strings.Replace(good, "maxParallel: 2", "notBefore: tomorrow", 1), "spec.notBefore"},
	} {
		errs := v.Validate(t.Context(), object(t, tc.in))
		if !strings.Contains(fmt.Sprint(errs), tc.want) {
			t.Errorf("%q: %v; want an error with %q", tc.in, errs, tc.want)
		}
	}
}

func TestEveryEmbeddedKindLoads(t *testing.T) {
	for _, k := range []string{"NodeRollout", "RevisionMigration"} {
		if _, err := ForKind(k); err != nil {
			t.Errorf("%s: %v", k, err)
		}
	}
	if _, err := ForKind("Pod"); err == nil {
		t.Error("ForKind(Pod) succeeded")
	}
}

// Unknown fields are named with their paths, and a name differing only in
// case is unknown, as the API server's strict field validation has them.
func TestNodeRolloutUnknownFields(t *testing.T) {
	v, err := ForKind("NodeRollout")
	if err != nil {
		t.Fatal(err)
	}
	doc := "apiVersion: nodewise.io/v1alpha1\nkind: NodeRollout\nmetadata: {name: up, labls: {a: b}}\n" +
		"spec: {maxparallel: 2, maintenanceWindows: [{start: '22:00', end: '04:00', timeZone: UTC}, {start: '10:00', end: '11:00', timezone: UTC}], drain: {policy: never, Timeout: 5m}}\n"
	obj := object(t, doc)
	got, err := v.UnknownFields(obj)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"metadata.labls", "spec.drain.Timeout", "spec.maintenanceWindows[1].timezone", "spec.maxparallel"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("UnknownFields = %v, want %v", got, want)
	}
	if _, ok := obj["spec"].(map[string]any)["maxparallel"]; !ok {
		t.Error("UnknownFields pruned the object it was given")
	}
	for path, want := range map[string]string{
		"spec.maintenanceWindows[1].timezone": "timeZone",
		"spec.maxparallel":                    "maxParallel",
		"spec.drain.Timeout":                  "timeout",
		"spec.nosuch":                         "",
		"spec.nosuch.deeper":                  "",
	} {
		if got := v.Suggest(path); got != want {
			t.Errorf("Suggest(%q) = %q, want %q", path, got, want)
		}
	}
	good := strings.NewReplacer("labls", "labels", "maxparallel", "maxParallel", "timezone", "timeZone", "Timeout", "timeout").Replace(doc)
	if got, _ := v.UnknownFields(object(t, good)); len(got) != 0 {
		t.Errorf("a rollout with every field spelled right: unknown %v", got)
	}
}

// spec.gates.conformance: a Job template of any shape (checked by a dry run
// at start, not by the schema), a namespace, a timeout of at least 1s, and
// a point that belongs to the kind.
func TestConformanceGateValidation(t *testing.T) {
	const job = "jobTemplate: {spec: {template: {spec: {restartPolicy: Never, containers: [{name: suite, image: 'example.com/suite:1'}]}}}}"
	for _, tc := range []struct{ kind, spec, want string }{
		{"RevisionMigration", "{from: a, to: b, rateLimit: {podsPerSecond: 1}, gates: {conformance: {namespace: qa, " + job + ", timeout: 5m, when: EveryWave}}}", ""},
		{"RevisionMigration", "{from: a, to: b, rateLimit: {podsPerSecond: 1}, gates: {conformance: {namespace: qa, " + job + ", when: AfterCanary}}}", "AfterCanary is for NodeRollouts"},
		{"RevisionMigration", "{from: a, to: b, rateLimit: {podsPerSecond: 1}, gates: {conformance: {namespace: qa, " + job + ", timeout: 0s}}}", "timeout must be a positive duration"},
		{"RevisionMigration", "{from: a, to: b, rateLimit: {podsPerSecond: 1}, gates: {conformance: {namespace: QA, " + job + "}}}", "spec.gates.conformance.namespace"},
		{"RevisionMigration", "{from: a, to: b, rateLimit: {podsPerSecond: 1}, gates: {conformance: {namespace: qa}}}", "spec.gates.conformance.jobTemplate: Required"},
		{"RevisionMigration", "{from: a, to: b, rateLimit: {podsPerSecond: 1}, gates: {conformance: {namespace: qa, " + job + ", when: Sometimes}}}", "spec.gates.conformance.when"},
		{"NodeRollout", "{canaryNodes: [n1], gates: {conformance: {namespace: qa, " + job + ", when: AfterCanary, logLines: 20}}}", ""},
		{"NodeRollout", "{gates: {conformance: {namespace: qa, " + job + ", when: AfterCanary}}}", "AfterCanary needs spec.canaryNodes"},
		{"NodeRollout", "{gates: {conformance: {namespace: qa, " + job + ", when: EveryWave}}}", "EveryWave is for RevisionMigrations"},
		{"NodeRollout", "{gates: {conformance: {namespace: qa, " + job + ", logLines: 0}}}", "spec.gates.conformance.logLines"},
		{"PodAgePolicy", "{maxAge: 720h, rateLimit: {podsPerSecond: 1}}", ""},
		{"PodAgePolicy", "{maxAge: 720h, rateLimit: {podsPerSecond: 1}, gates: {conformance: {namespace: qa, " + job + "}}}", "a PodAgePolicy moves no version to test"},
	} {
		v, err := ForKind(tc.kind)
		if err != nil {
			t.Fatal(err)
		}
		doc := "apiVersion: nodewise.io/v1alpha1\nkind: " + tc.kind + "\nmetadata: {name: x}\nspec: " + tc.spec + "\n"
		errs := v.Validate(t.Context(), object(t, doc))
		switch {
		case tc.want == "" && len(errs) != 0:
			t.Errorf("%s %s: %v", tc.kind, tc.spec, errs)
		case tc.want != "" && !strings.Contains(fmt.Sprint(errs), tc.want):
			t.Errorf("%s %s: %v; want an error with %q", tc.kind, tc.spec, errs, tc.want)
		}
	}
}
