// Package nodeagent is the per-node agent: it measures the TCP health of
// every pod on its node from the kernel (eBPF, or the per-namespace /proc
// counters as a fallback), attributes it to pods by network namespace, and
// serves it as wire.Snapshot JSON at /v1/snapshot and as Prometheus
// metrics at /metrics.
//
// # Credential
//
// The API is served over TLS (certificate and key from Config). Every
// endpoint except /healthz requires a bearer token:
//
//	Authorization: Bearer <token>
//
// where <token> is the content of Config.TokenFile with surrounding
// whitespace trimmed. The agent compares SHA-256 digests of the presented
// and configured tokens in constant time and answers 401 otherwise. The file
// is re-read when its modification time changes, so a rotated Kubernetes
// Secret takes effect without a restart. A client needs only the agent's CA
// (to verify the serving certificate) and the same token file; with
// go-retryablehttp that is one header on each request.
//
// A bearer token was chosen over mTLS because the orchestrator and the
// agent then share one Secret, with no client-certificate issuance or CA
// rotation to run, and Prometheus can scrape /metrics with
// bearer_token_file.
package nodeagent
