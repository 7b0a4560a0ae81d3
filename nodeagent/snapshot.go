package nodeagent

import (
	"sort"
	"time"

	"github.com/nodewise/nodewise/bpf"
	"github.com/nodewise/nodewise/health/wire"
)

// snapshotMeta is what a snapshot says about the agent itself.
type snapshotMeta struct {
	node, mode, version string
	start, now          time.Time
	seq                 uint64 // this snapshot's number since start (from 1)
}

var failureClasses = [bpf.FailClasses]wire.ConnectErrorClass{
	bpf.FailRefused:     wire.ConnectRefused,
	bpf.FailTimeout:     wire.ConnectTimeout,
	bpf.FailUnreachable: wire.ConnectUnreachable,
	bpf.FailReset:       wire.ConnectReset,
	bpf.FailOther:       wire.ConnectOther,
}

// buildSnapshot attributes a reading to pods. Every pod the resolver knows
// gets both sides, zero or not; namespaces it does not know are left out.
func buildSnapshot(meta snapshotMeta, r reading, pods map[uint32]Pod) wire.Snapshot {
	s := wire.Snapshot{
		Node:         meta.node,
		Time:         meta.now,
		Mode:         meta.mode,
		AgentVersion: meta.version,
		StartTime:    meta.start,
		Seq:          meta.seq,
		Pods:         []wire.PodCounters{},
	}
	for ns, pod := range pods {
		for _, side := range []uint32{bpf.SideApp, bpf.SideProxy} {
			key := bpf.Key{Netns: ns, Side: side}
			s.Pods = append(s.Pods, podCounters(pod, side, r.counters[key], r.ages[key]))
		}
	}
	sort.Slice(s.Pods, func(i, j int) bool {
		a, b := s.Pods[i], s.Pods[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.Side < b.Side
	})
	return s
}

func sideName(side uint32) wire.Side {
	if side == bpf.SideProxy {
		return wire.SideProxy
	}
	return wire.SideApp
}

func podCounters(pod Pod, side uint32, c *bpf.Counters, ages []uint64) wire.PodCounters {
	pc := wire.PodCounters{
		Namespace:      pod.Namespace,
		Name:           pod.Name,
		UID:            pod.UID,
		Side:           sideName(side),
		ConnectLatency: wire.Log2Histogram{Buckets: make([]uint64, wire.Log2Buckets)},
		SRTT:           wire.Log2Histogram{Buckets: make([]uint64, wire.Log2Buckets)},
		ConnAges:       make([]uint64, len(wire.AgeBucketBoundsSeconds)+1),
	}
	copy(pc.ConnAges, ages)
	if c == nil {
		return pc
	}
	pc.ResetsSent = c.ResetsSent
	pc.ResetsReceived = c.ResetsReceived
	pc.Connects = c.Connects
	pc.Accepts = c.Accepts
	pc.Retransmits = c.Retransmits
	copy(pc.ConnectLatency.Buckets, c.ConnectLatency[:])
	copy(pc.SRTT.Buckets, c.SRTT[:])
	for i, n := range c.ConnectFailures {
		if n == 0 {
			continue
		}
		if pc.ConnectFailures == nil {
			pc.ConnectFailures = map[wire.ConnectErrorClass]uint64{}
		}
		pc.ConnectFailures[failureClasses[i]] += n
	}
	return pc
}
