package nodeagent

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/nodewise/nodewise/bpf"
	"github.com/nodewise/nodewise/health/wire"
)

// probe is what the agent needs from the loaded programs.
type probe interface {
	ReadCounters() (map[bpf.Key]*bpf.Counters, error)
	ReadConns() ([]bpf.Conn, error)
	EstablishedOverflow() (uint64, error)
	MissedRuns() (uint64, error)
	ReadNetnsCgroups() (map[uint32][]uint64, error)
	Close() error
}

func loadProbe() (probe, error) { return bpf.Load() }

type ebpfSource struct {
	// mu makes reads take turns: a scrape of /metrics and a snapshot can
	// come at once, and the probe reuses its buffers between reads.
	mu sync.Mutex
	p  probe
}

func (s *ebpfSource) mode() string { return wire.ModeEBPF }

func (s *ebpfSource) read() (reading, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cs, err := s.p.ReadCounters()
	if err != nil {
		return reading{}, err
	}
	conns, err := s.p.ReadConns()
	if err != nil {
		return reading{}, err
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return reading{}, fmt.Errorf("reading the monotonic clock: %w", err)
	}
	over, err := s.p.EstablishedOverflow()
	if err != nil {
		return reading{}, err
	}
	missed, err := s.p.MissedRuns()
	if err != nil {
		return reading{}, err
	}
	return reading{counters: cs, ages: bucketAges(conns, uint64(ts.Nano())), untracked: over, missed: missed}, nil
}

func (s *ebpfSource) close() error { return s.p.Close() }
