package wire

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// The checks of istio-cni's own health a node agent makes (CNIHealth.Checks).
const (
	// CNICheckConfig: the CNI config the container runtime uses (the first
	// file of the conf dir by name) holds the istio-cni plugin, chained or
	// as its own config.
	CNICheckConfig = "config"
	// CNICheckKubeconfig: the kubeconfig istio-cni wrote is there and names
	// a server and a token.
	CNICheckKubeconfig = "kubeconfig"
	// CNICheckToken: the API server authenticates that kubeconfig's token as
	// istio-cni's ServiceAccount (a TokenReview the agent makes as itself).
	CNICheckToken = "token"
	// CNICheckPlugin: the plugin binary is there, runs, and reports the
	// version expected (when one was asked for).
	CNICheckPlugin = "plugin"
)

// CNIHealth is what a node agent serves at /v1/cni: istio-cni's own health
// on its node, one entry per check, each naming the file it read.
type CNIHealth struct {
	Node string    `json:"node"`
	Time time.Time `json:"time"`
	// Expected is the plugin version asked for ("" none: the version found
	// is reported, not compared).
	Expected string     `json:"expected,omitempty"`
	Checks   []CNICheck `json:"checks"`
}

// CNICheck is one check of CNIHealth.
type CNICheck struct {
	Check  string `json:"check"` // CNICheckConfig, …
	File   string `json:"file"`  // the file (or directory) the check read
	OK     bool   `json:"ok"`
	Detail string `json:"detail"` // what was found, or why it failed
}

// OK is whether every check passed (false with none).
func (h CNIHealth) OK() bool {
	for _, c := range h.Checks {
		if !c.OK {
			return false
		}
	}
	return len(h.Checks) > 0
}

// Problems is one line per failed check, naming the node, the check and the file.
func (h CNIHealth) Problems() []string {
	var out []string
	for _, c := range h.Checks {
		if !c.OK {
			out = append(out, fmt.Sprintf("istio-cni on node %s: check %s failed on %s: %s", h.Node, c.Check, c.File, c.Detail))
		}
	}
	if len(h.Checks) == 0 {
		out = append(out, fmt.Sprintf("istio-cni on node %s: the agent made no check", h.Node))
	}
	return out
}

// Headline is one line for an unhealthy node: the first failed check and
// what it found, naming the file by its base name (Problems has the path),
// and how many more failed.
func (h CNIHealth) Headline() string {
	var first string
	n := 0
	for _, c := range h.Checks {
		if !c.OK {
			if n == 0 {
				first = fmt.Sprintf("istio-cni check %s failed on %s: %s", c.Check, filepath.Base(c.File), c.Detail)
			}
			n++
		}
	}
	switch {
	case len(h.Checks) == 0:
		return "istio-cni: the agent made no check"
	case n > 1:
		return fmt.Sprintf("%s (+%d more)", first, n-1)
	}
	return first
}

// Summary is one line for a healthy node: each check and what it found.
func (h CNIHealth) Summary() string {
	parts := make([]string, 0, len(h.Checks))
	for _, c := range h.Checks {
		parts = append(parts, fmt.Sprintf("%s ok (%s: %s)", c.Check, c.File, c.Detail))
	}
	return fmt.Sprintf("istio-cni on node %s: %s", h.Node, strings.Join(parts, "; "))
}
