package revisions

import "time"

// bucket is a token bucket of pod restarts: rate tokens a second, at most
// burst banked. Restarting a workload of n pods takes n tokens; a workload
// larger than the burst may start once the bucket is full and leaves it in
// debt, so over any window T at most rate*T + max(burst, largest workload)
// pods are restarted. It starts empty, so a restarted controller cannot burst.
type bucket struct {
	rate, burst, tokens float64
	last                time.Time
}

func newBucket(podsPerSecond int32, now time.Time) *bucket {
	r := float64(podsPerSecond)
	return &bucket{rate: r, burst: r, last: now}
}

// take spends n tokens if the bucket allows it now, and otherwise says how
// long until it will.
func (b *bucket) take(n int, now time.Time) (bool, time.Duration) {
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.tokens = min(b.burst, b.tokens+dt*b.rate)
		b.last = now
	}
	need := min(float64(n), b.burst)
	if b.tokens >= need {
		b.tokens -= float64(n)
		return true, 0
	}
	return false, time.Duration((need - b.tokens) / b.rate * float64(time.Second))
}
