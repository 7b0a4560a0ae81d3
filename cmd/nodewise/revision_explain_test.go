package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/nodewise/nodewise/api/v1alpha1"
)

func TestWriteWaveExplain(t *testing.T) {
	rm := &v1alpha1.RevisionMigration{}
	rm.Name = "to-1-28"
	rm.Status.Phase, rm.Status.Reason = v1alpha1.MigrationHalted, "wave canary failed its gate"
	rm.Status.Waves = []v1alpha1.ResolvedWave{
		{Name: "canary", Namespaces: []string{"shop"}, Judgement: &v1alpha1.WaveJudgement{Outcome: "Fail", JudgedAt: "2026-12-01T10:00:00Z",
			Reasons: []string{"migrated pods (2) vs not-yet-migrated pods (6): resetsReceived 0 -> 0.3 per connection, p<0.001"},
			Rows:    []v1alpha1.JudgementRow{{Pod: "migrated pods (2) vs not-yet-migrated pods (6)", Metric: "resetsReceived", Before: "0/conn", After: "0.3/conn", P: "p<0.001", Regressed: true}}}},
		{Name: "rest", Namespaces: []string{"cart"}},
	}
	var b bytes.Buffer
	if err := writeWaveExplain(&b, rm, ""); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"wave canary (shop): Fail at 2026-12-01T10:00:00Z", "resetsReceived  0/conn", "p<0.001", "true", "wave rest (cart): not judged yet"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain output lacks %q:\n%s", want, out)
		}
	}
	if err := writeWaveExplain(&b, rm, "nope"); err == nil || !strings.Contains(err.Error(), `no wave "nope"`) {
		t.Errorf("unknown wave: %v", err)
	}
}
