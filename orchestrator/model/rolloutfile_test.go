package model

import (
	"strings"
	"testing"
)

// TestParseRolloutControlGroupOff: #27 finding 8. An unquoted Off (or On)
// under spec.gates.controlGroup is a YAML 1.1 boolean: the reader says so
// and names the word to write, instead of a decoding error about a bool.
func TestParseRolloutControlGroupOff(t *testing.T) {
	for word, want := range map[string]string{"Off": "write Disabled", "on": "write Enabled", `"Disabled"`: ""} {
		doc := "apiVersion: nodewise.io/v1alpha1\nkind: NodeRollout\nmetadata: {name: r}\nspec:\n  gates:\n    controlGroup: " + word + "\n"
		_, p, err := ParseRollout([]byte(doc))
		switch {
		case want == "" && (err != nil || !p.NoControlGroup):
			t.Errorf("controlGroup: %s: %v, control group off %v; want it read as Disabled", word, err, p.NoControlGroup)
		case want != "" && (err == nil || !strings.Contains(err.Error(), "spec.gates.controlGroup") || !strings.Contains(err.Error(), want)):
			t.Errorf("controlGroup: %s: %v; want an error naming spec.gates.controlGroup that says %q", word, err, want)
		}
	}
}
