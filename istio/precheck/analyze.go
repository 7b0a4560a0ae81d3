package precheck

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
)

// analyzeMessage is one message of `istioctl analyze -o json`.
type analyzeMessage struct {
	Code    string `json:"code"`
	Level   string `json:"level"`
	Message string `json:"message"`
	Origin  string `json:"origin"`
}

// Analyze runs the real istioctl's analyzers over every namespace and
// returns their errors and warnings as findings (infos are left out). args
// are istioctl's connection flags (--kubeconfig, --context).
func Analyze(ctx context.Context, istioctl string, args ...string) ([]Finding, error) {
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, istioctl, append([]string{"analyze", "--all-namespaces", "--output", "json"}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	// istioctl analyze exits non-zero when it finds errors; its JSON is
	// then still on stdout.
	runErr := cmd.Run()
	var msgs []analyzeMessage
	if err := json.Unmarshal(out.Bytes(), &msgs); err != nil {
		if runErr != nil {
			return nil, fmt.Errorf("istioctl analyze: %v: %s", runErr, strings.TrimSpace(errOut.String()))
		}
		return nil, fmt.Errorf("istioctl analyze: reading its JSON: %w", err)
	}
	var fs []Finding
	for _, m := range msgs {
		sev := Severity("")
		switch m.Level {
		case "Error":
			sev = Error
		case "Warning":
			sev = Warning
		default:
			continue
		}
		subject := m.Origin
		if subject == "" {
			subject = "cluster"
		}
		fs = append(fs, Finding{Check: CheckAnalyze, Severity: sev, Subject: subject, Message: m.Code + ": " + m.Message})
	}
	return fs, nil
}
