// Package record keeps what the judge needs of a node beyond one process:
// the Recorder samples each tracked node's agent, places the samples on the
// orchestrator's clock (Clock says what it had to correct), and serves the
// baseline and soak windows; Baseline and Controls are a node's and its
// control group's samples as persisted in NodeRollout status, with their
// bounded codecs (EncodeBaseline, EncodeControls and their decoders).
package record
