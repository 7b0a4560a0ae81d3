// Package probe holds the nodewise-probe manifest (probe.yaml), embedded so
// the simulated clusters of the tests and the demo install the DaemonSet
// users install.
package probe

import _ "embed"

// Manifest is probe.yaml: the Namespace, ServiceAccount, headless Service
// and DaemonSet of the nodewise probe.
//
//go:embed probe.yaml
var Manifest []byte
