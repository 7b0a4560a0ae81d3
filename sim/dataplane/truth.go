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
	// Resets are the streams that were reset: when, and how old they were.
	Resets []StreamReset
}

// StreamReset is one stream reset, as its client saw it.
type StreamReset struct {
	At  time.Time     // when the client saw the reset
	Age time.Duration // how long the stream had been open
}

// ResetAges are the ages the reset streams had when they were reset.
func (t Truth) ResetAges() []time.Duration {
	out := make([]time.Duration, len(t.Resets))
	for i, r := range t.Resets {
		out[i] = r.Age
	}
	return out
}

// Add sums two Truths.
func (t Truth) Add(o Truth) Truth {
	return Truth{
		Requests: t.Requests + o.Requests, RequestsFailed: t.RequestsFailed + o.RequestsFailed,
		RequestsFailedEvicted: t.RequestsFailedEvicted + o.RequestsFailedEvicted,
		Streams:               t.Streams + o.Streams, StreamsReset: t.StreamsReset + o.StreamsReset,
		StreamsGraceful: t.StreamsGraceful + o.StreamsGraceful, StreamsOther: t.StreamsOther + o.StreamsOther,
		RSTs: t.RSTs + o.RSTs, Aborted: t.Aborted + o.Aborted,
		Resets: append(append([]StreamReset(nil), t.Resets...), o.Resets...),
	}
}

// Sub is t minus o (a window between two readings). Resets are matched one
// by one, not by count: a Truth sums pods in no fixed order, so the resets
// of a window are not the tail of the later reading.
func (t Truth) Sub(o Truth) Truth {
	seen := map[StreamReset]int{}
	for _, r := range o.Resets {
		seen[r.key()]++
	}
	var resets []StreamReset
	for _, r := range t.Resets {
		if k := r.key(); seen[k] > 0 {
			seen[k]--
			continue
		}
		resets = append(resets, r)
	}
	return Truth{
		Requests: t.Requests - o.Requests, RequestsFailed: t.RequestsFailed - o.RequestsFailed,
		RequestsFailedEvicted: t.RequestsFailedEvicted - o.RequestsFailedEvicted,
		Streams:               t.Streams - o.Streams, StreamsReset: t.StreamsReset - o.StreamsReset,
		StreamsGraceful: t.StreamsGraceful - o.StreamsGraceful, StreamsOther: t.StreamsOther - o.StreamsOther,
		RSTs: t.RSTs - o.RSTs, Aborted: t.Aborted - o.Aborted,
		Resets: resets,
	}
}

// key is r comparable with ==: its wall-clock instant, without the
// monotonic reading.
func (r StreamReset) key() StreamReset { return StreamReset{At: r.At.Round(0), Age: r.Age} }

// rst counts a reset the app saw when err says it got one.
func (c *truthCounters) rst(err error) {
	if gotRST(err) {
		c.rsts.Add(1)
	}
}

// MinResetAge is the age of the youngest reset stream (0 when none was reset).
func (t Truth) MinResetAge() time.Duration {
	var m time.Duration
	for i, r := range t.Resets {
		if i == 0 || r.Age < m {
			m = r.Age
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

	mu     sync.Mutex
	resets []StreamReset
}

func (c *truthCounters) reset(age time.Duration) {
	c.streamsReset.Add(1)
	c.rsts.Add(1)
	c.mu.Lock()
	c.resets = append(c.resets, StreamReset{At: time.Now(), Age: age})
	c.mu.Unlock()
}

func (c *truthCounters) load() Truth {
	return Truth{
		Requests: c.requests.Load(), RequestsFailed: c.requestsFailed.Load(), RequestsFailedEvicted: c.requestsFailedEvicted.Load(),
		Streams:      c.streams.Load(),
		StreamsReset: c.streamsReset.Load(), StreamsGraceful: c.streamsGraceful.Load(), StreamsOther: c.streamsOther.Load(),
		RSTs: c.rsts.Load(), Aborted: c.aborted.Load(),
		Resets: c.resetList(),
	}
}

func (c *truthCounters) resetList() []StreamReset {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]StreamReset(nil), c.resets...)
}
