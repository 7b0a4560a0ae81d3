package nodeagent

import (
	"github.com/nodewise/nodewise/bpf"
)

// fakeProbe stands in for the loaded programs in tests that are about the
// agent's plumbing rather than the kernel.
type fakeProbe struct {
	counters map[bpf.Key]*bpf.Counters
	conns    []bpf.Conn
	missed   uint64
}

func (f *fakeProbe) ReadCounters() (map[bpf.Key]*bpf.Counters, error) { return f.counters, nil }
func (f *fakeProbe) ReadConns() ([]bpf.Conn, error)                   { return f.conns, nil }
func (f *fakeProbe) EstablishedOverflow() (uint64, error)             { return 0, nil }
func (f *fakeProbe) MissedRuns() (uint64, error)                      { return f.missed, nil }
func (f *fakeProbe) ReadNetnsCgroups() (map[uint32][]uint64, error)   { return nil, nil }
func (f *fakeProbe) Close() error                                     { return nil }
