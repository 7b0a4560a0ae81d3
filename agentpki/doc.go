// Package agentpki gives the node agents their credentials with no shared
// static secret:
//
//   - Serving certificates. Each agent generates its key in memory and asks
//     for a certificate with a CertificateSigningRequest of signer
//     nodewise.io/agent-serving (Requester). The orchestrator's Signer approves
//     a request only when it comes from the agent ServiceAccount on the very
//     node it names (the pod-bound token's node-name), for that node's name and
//     InternalIPs only, and signs it from a CA it keeps in the Secret
//     nodewise-agent-ca, rotated before it expires. The public bundle is
//     published in the ConfigMap nodewise-agent-ca-bundle, and the Signer's Pool
//     is what the orchestrator trusts, verifying each certificate for the node's
//     name (an address the node writes itself is no identity).
//   - Bearer tokens. The orchestrator presents its pod's projected
//     ServiceAccount token for the audience nodewise-agent; the agent checks it
//     with a TokenReview (Reviewer) and admits only the allowed callers.
package agentpki

// Names nodewise owns for the agents' credentials (docs/runbook.md lists them).
const (
	// SignerName is the CertificateSigningRequest signer of the agents' serving certificates.
	SignerName = "nodewise.io/agent-serving"
	// CASecretName holds the CA (tls.crt, tls.key) and the trust bundle (ca.crt).
	CASecretName = "nodewise-agent-ca"
	// BundleConfigMapName publishes the trust bundle (ca.crt) to anyone who dials the agents.
	BundleConfigMapName = "nodewise-agent-ca-bundle"
	// DefaultAudience is the audience of the tokens the agents accept.
	DefaultAudience = "nodewise-agent"
	// NodeNameExtra is the user-info extra key the API server sets from a
	// pod-bound ServiceAccount token: the node the pod runs on.
	NodeNameExtra = "authentication.kubernetes.io/node-name"
)
