package dataplane

import (
	"fmt"
	"sync/atomic"
)

// Truth is what an app pod's clients saw with their own eyes.
type Truth struct {
	Requests       int64 // short requests attempted
	RequestsFailed int64 // short requests that did not get their answer
	Streams        int64 // long-lived streams opened
	StreamsReset   int64 // streams that ended with a reset (ECONNRESET/EPIPE)
	// StreamsGraceful counts streams the other side closed with a FIN, or
	// that the client closed itself (at the end of their life or on SIGTERM).
	StreamsGraceful int64
	StreamsOther    int64 // streams that ended otherwise (timeouts)
}

// Add sums two Truths.
func (t Truth) Add(o Truth) Truth {
	return Truth{
		Requests: t.Requests + o.Requests, RequestsFailed: t.RequestsFailed + o.RequestsFailed,
		Streams: t.Streams + o.Streams, StreamsReset: t.StreamsReset + o.StreamsReset,
		StreamsGraceful: t.StreamsGraceful + o.StreamsGraceful, StreamsOther: t.StreamsOther + o.StreamsOther,
	}
}

// Sub is t minus o (a window between two readings).
func (t Truth) Sub(o Truth) Truth {
	return Truth{
		Requests: t.Requests - o.Requests, RequestsFailed: t.RequestsFailed - o.RequestsFailed,
		Streams: t.Streams - o.Streams, StreamsReset: t.StreamsReset - o.StreamsReset,
		StreamsGraceful: t.StreamsGraceful - o.StreamsGraceful, StreamsOther: t.StreamsOther - o.StreamsOther,
	}
}

func (t Truth) String() string {
	return fmt.Sprintf("requests %d (failed %d), streams %d (reset %d, closed gracefully %d, other %d)",
		t.Requests, t.RequestsFailed, t.Streams, t.StreamsReset, t.StreamsGraceful, t.StreamsOther)
}

type truthCounters struct {
	requests, requestsFailed, streams, streamsReset, streamsGraceful, streamsOther atomic.Int64
}

func (c *truthCounters) load() Truth {
	return Truth{
		Requests: c.requests.Load(), RequestsFailed: c.requestsFailed.Load(), Streams: c.streams.Load(),
		StreamsReset: c.streamsReset.Load(), StreamsGraceful: c.streamsGraceful.Load(), StreamsOther: c.streamsOther.Load(),
	}
}
