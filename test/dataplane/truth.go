package dataplane

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Truth is what an app pod's clients saw with their own eyes.
type Truth struct {
	Requests       int64 // short requests and stream opens attempted
	RequestsFailed int64 // of those, the ones that did not get their answer
	// RequestsFailedEvicted is the part of RequestsFailed sent to a pod that
	// was stopping (evicted or deleted) or gone: caused by an eviction, not
	// by a ztunnel swap.
	RequestsFailedEvicted int64
	Streams               int64 // long-lived streams opened (first answer received)
	StreamsReset          int64 // streams that ended with a reset (ECONNRESET/EPIPE)
	// StreamsGraceful counts streams the other side closed with a FIN, or
	// that the client closed itself (at the end of their life or on SIGTERM).
	StreamsGraceful int64
	StreamsOther    int64 // streams that ended otherwise (timeouts)
	// RSTs counts the resets the pod's app sockets received, as the app saw
	// them: connects refused, requests and streams reset, and connections
	// its server was serving that were reset. It is what the node agent's
	// app-side "resets received" of that pod should count.
	RSTs int64
	// Aborted counts the short requests the client ended with an abortive
	// close on purpose (Traffic.AbortEvery): resets it sent, not received.
	Aborted int64
	// ResetAges are the ages the reset streams had when they were reset.
	ResetAges []time.Duration
}

// Add sums two Truths.
func (t Truth) Add(o Truth) Truth {
	return Truth{
		Requests: t.Requests + o.Requests, RequestsFailed: t.RequestsFailed + o.RequestsFailed,
		RequestsFailedEvicted: t.RequestsFailedEvicted + o.RequestsFailedEvicted,
		Streams:               t.Streams + o.Streams, StreamsReset: t.StreamsReset + o.StreamsReset,
		StreamsGraceful: t.StreamsGraceful + o.StreamsGraceful, StreamsOther: t.StreamsOther + o.StreamsOther,
		RSTs: t.RSTs + o.RSTs, Aborted: t.Aborted + o.Aborted,
		ResetAges: append(append([]time.Duration(nil), t.ResetAges...), o.ResetAges...),
	}
}

// Sub is t minus o (a window between two readings).
func (t Truth) Sub(o Truth) Truth {
	return Truth{
		Requests: t.Requests - o.Requests, RequestsFailed: t.RequestsFailed - o.RequestsFailed,
		RequestsFailedEvicted: t.RequestsFailedEvicted - o.RequestsFailedEvicted,
		Streams:               t.Streams - o.Streams, StreamsReset: t.StreamsReset - o.StreamsReset,
		StreamsGraceful: t.StreamsGraceful - o.StreamsGraceful, StreamsOther: t.StreamsOther - o.StreamsOther,
		RSTs: t.RSTs - o.RSTs, Aborted: t.Aborted - o.Aborted,
		ResetAges: t.ResetAges[min(len(o.ResetAges), len(t.ResetAges)):],
	}
}

// rst counts a reset the app saw when err says it got one.
func (c *truthCounters) rst(err error) {
	if gotRST(err) {
		c.rsts.Add(1)
	}
}

// MinResetAge is the age of the youngest reset stream (0 when none was reset).
func (t Truth) MinResetAge() time.Duration {
	var m time.Duration
	for i, a := range t.ResetAges {
		if i == 0 || a < m {
			m = a
		}
	}
	return m
}

func (t Truth) String() string {
	return fmt.Sprintf("requests %d (failed %d, %d of them to evicted pods), streams %d (reset %d, closed gracefully %d, other %d), resets received by apps %d",
		t.Requests, t.RequestsFailed, t.RequestsFailedEvicted, t.Streams, t.StreamsReset, t.StreamsGraceful, t.StreamsOther, t.RSTs)
}

type truthCounters struct {
	requests, requestsFailed, requestsFailedEvicted, streams, streamsReset, streamsGraceful, streamsOther, rsts, aborted atomic.Int64

	mu        sync.Mutex
	resetAges []time.Duration
}

func (c *truthCounters) reset(age time.Duration) {
	c.streamsReset.Add(1)
	c.rsts.Add(1)
	c.mu.Lock()
	c.resetAges = append(c.resetAges, age)
	c.mu.Unlock()
}

func (c *truthCounters) load() Truth {
	return Truth{
		Requests: c.requests.Load(), RequestsFailed: c.requestsFailed.Load(), RequestsFailedEvicted: c.requestsFailedEvicted.Load(),
		Streams:      c.streams.Load(),
		StreamsReset: c.streamsReset.Load(), StreamsGraceful: c.streamsGraceful.Load(), StreamsOther: c.streamsOther.Load(),
		RSTs: c.rsts.Load(), Aborted: c.aborted.Load(),
		ResetAges: c.ages(),
	}
}

func (c *truthCounters) ages() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.resetAges...)
}
