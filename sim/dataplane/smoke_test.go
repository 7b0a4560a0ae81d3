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
	// The node agents' resolvers together name every app pod once, by the
	// inode of its own namespace.
	seen := map[uint32]string{}
	for _, n := range e.c.Nodes {
		pods, err := e.dp.Resolver(n.Name).Pods()
		if err != nil {
			t.Fatal(err)
		}
		for ino, p := range pods {
			if prev, dup := seen[ino]; dup {
				t.Errorf("netns %d named twice: %s and %s/%s", ino, prev, p.Namespace, p.Name)
			}
			seen[ino] = p.Namespace + "/" + p.Name
		}
	}
	byPod, _ := e.dp.Truth()
	if len(seen) != len(byPod) || len(seen) == 0 {
		t.Errorf("resolvers name %d pods, the data plane runs %d", len(seen), len(byPod))
	}
	for _, name := range seen {
		if _, ok := byPod[name]; !ok {
			t.Errorf("resolver names %s, which the data plane does not run", name)
		}
	}
}
