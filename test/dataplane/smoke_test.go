package dataplane

import (
	"testing"
	"time"
)

// TestTrafficFlowsThroughStandins: with the data plane behind the kubelet,
// app pods on different nodes talk through the ztunnel stand-ins, and a
// steady cluster shows no failed request and no reset.
func TestTrafficFlowsThroughStandins(t *testing.T) {
	e := newLiveEnv(t, 3, Traffic{})
	_, before := e.dp.Truth()
	time.Sleep(3 * time.Second)
	_, after := e.dp.Truth()
	w := after.Sub(before)
	t.Logf("3 s of traffic: %s", w)
	if w.Requests < 20 {
		t.Errorf("only %d requests in 3 s: traffic is not flowing", w.Requests)
	}
	if w.RequestsFailed != 0 || w.StreamsReset != 0 {
		t.Errorf("steady cluster: %d requests failed, %d streams reset; want 0", w.RequestsFailed, w.StreamsReset)
	}
	if after.Streams == 0 {
		t.Errorf("no long-lived stream opened")
	}
}
