package observe

import "testing"

// TestClaims: claims and workers are per rollout and node, independent of
// each other; a second worker on a node is refused until the first ends;
// Holds sees either, for its own rollout only (not one whose name merely
// starts the same).
func TestClaims(t *testing.T) {
	var c Claims // the zero value is ready
	if c.Claimed("r", "n1") || c.Working("r", "n1") || c.Holds("r") {
		t.Fatal("an empty Claims holds something")
	}
	c.Unclaim("r", "n1") // on nothing: harmless
	c.EndWorker("r", "n1")

	c.Claim("r", "n1")
	if !c.Claimed("r", "n1") {
		t.Error("n1 not claimed after Claim")
	}
	if c.Claimed("r", "n2") || c.Claimed("other", "n1") || c.Working("r", "n1") {
		t.Error("a claim leaked to another node, rollout, or the workers")
	}
	if !c.Holds("r") || c.Holds("other") {
		t.Errorf("Holds(r)=%v Holds(other)=%v after claiming r/n1", c.Holds("r"), c.Holds("other"))
	}
	c.Unclaim("r", "n1")
	if c.Claimed("r", "n1") || c.Holds("r") {
		t.Error("the claim outlived Unclaim")
	}

	if !c.StartWorker("r", "n1") {
		t.Fatal("the first worker on r/n1 was refused")
	}
	if c.StartWorker("r", "n1") {
		t.Error("a second worker on r/n1 was allowed")
	}
	if !c.StartWorker("r", "n2") || !c.StartWorker("other", "n1") {
		t.Error("a worker on another node or rollout was refused")
	}
	if !c.Working("r", "n1") || c.Claimed("r", "n1") {
		t.Error("Working/Claimed mixed up")
	}
	if !c.Holds("r") || c.Holds("r-2") {
		t.Errorf("Holds(r)=%v Holds(r-2)=%v with workers on r", c.Holds("r"), c.Holds("r-2"))
	}
	c.EndWorker("r", "n1")
	if c.Working("r", "n1") {
		t.Error("the worker outlived EndWorker")
	}
	if !c.StartWorker("r", "n1") {
		t.Error("a new worker on r/n1 was refused after the first ended")
	}
	c.EndWorker("r", "n1")
	c.EndWorker("r", "n2")
	if c.Holds("r") {
		t.Error("r still held with no claim and no worker")
	}
	if !c.Holds("other") {
		t.Error("ending r's workers dropped other's")
	}
}
