package nodeagent

import (
	"github.com/nodewise/nodewise/bpf"
	"github.com/nodewise/nodewise/health/wire"
)

// reading is one read of a counter source: cumulative counters and the
// established connections' age buckets, by namespace and side.
type reading struct {
	counters map[bpf.Key]*bpf.Counters
	ages     map[bpf.Key][]uint64 // len(health.AgeBucketBoundsSeconds)+1 entries
	// untracked counts established sockets missing from ages because the
	// kernel map was full.
	untracked uint64
	// missed counts program runs the kernel skipped (their events are
	// lost).
	missed uint64
}

// source is where counts come from: the eBPF programs or /proc.
type source interface {
	mode() string
	read() (reading, error)
	close() error
}

// ageBucket returns the index of the age bucket that holds ageSeconds.
func ageBucket(ageSeconds float64) int {
	for i, b := range wire.AgeBucketBoundsSeconds {
		if ageSeconds < b {
			return i
		}
	}
	return len(wire.AgeBucketBoundsSeconds)
}

// bucketAges turns established connections into age buckets by key, given
// the monotonic clock now (the clock the programs stamp with).
func bucketAges(conns []bpf.Conn, nowNs uint64) map[bpf.Key][]uint64 {
	out := map[bpf.Key][]uint64{}
	for _, c := range conns {
		b := out[c.Key]
		if b == nil {
			b = make([]uint64, len(wire.AgeBucketBoundsSeconds)+1)
			out[c.Key] = b
		}
		var age float64
		if nowNs > c.StartNs {
			age = float64(nowNs-c.StartNs) / 1e9
		}
		b[ageBucket(age)]++
	}
	return out
}
