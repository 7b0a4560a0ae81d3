package nodeagent

import (
	"fmt"
	"sync"

	"github.com/nodewise/nodewise/bpf"
	"github.com/nodewise/nodewise/health/wire"
)

// procSource reads the per-namespace TCP MIB counters from
// /proc/<pid>/net/{snmp,netstat} of one process in each namespace. It
// cannot tell ztunnel's sockets from the app's, so everything is side=app;
// it has no histograms and no connection ages. Counts start from the first
// read of each namespace. Namespaces are keyed by KeyProcNet (no ptrace
// rights needed), so a Resolver for proc mode must be keyed the same way.
type procSource struct {
	root string
	pids func() (map[uint32]int, error)

	mu   sync.Mutex
	base map[uint32]procCounts
	last map[uint32]procCounts // cumulative since base, kept after the namespace's processes are gone
}

func newProcSource(root string) *procSource {
	return &procSource{
		root: root,
		pids: func() (map[uint32]int, error) { return netnsPIDs(root, KeyProcNet) },
		base: map[uint32]procCounts{},
		last: map[uint32]procCounts{},
	}
}

func (s *procSource) mode() string { return wire.ModeProc }

// readPID reads the counters of namespace ns from process pid, the one the
// scan found in it: through its /proc directory, and only while it is still
// in ns (its PID may have gone to a process of another namespace since).
func (s *procSource) readPID(ns uint32, pid int) (procCounts, error) {
	d, err := openProcDir(s.root, pid)
	if err != nil {
		return procCounts{}, err
	}
	defer d.Close()
	if in, err := KeyProcNet.ofProc(d); err != nil || in != ns {
		return procCounts{}, fmt.Errorf("process %d of namespace %d: %w", pid, ns, errGone)
	}
	var maps [2]map[string]map[string]uint64
	for i, f := range []string{"net/snmp", "net/netstat"} {
		b, err := d.readFile(f)
		if err != nil {
			return procCounts{}, err
		}
		m, err := parseNetStats(string(b))
		if err != nil {
			return procCounts{}, fmt.Errorf("parsing %d/%s: %w", pid, f, err)
		}
		maps[i] = m
	}
	return procCountsFrom(maps[0], maps[1]), nil
}

func (s *procSource) read() (reading, error) {
	pids, err := s.pids()
	if err != nil {
		return reading{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for ns, pid := range pids {
		cur, err := s.readPID(ns, pid)
		if err != nil {
			continue // the process exited between the scan and the read
		}
		base, ok := s.base[ns]
		if !ok {
			s.base[ns] = cur
			base = cur
		}
		s.last[ns] = cur.delta(base)
	}
	out := reading{counters: map[bpf.Key]*bpf.Counters{}, ages: map[bpf.Key][]uint64{}}
	for ns, d := range s.last {
		c := &bpf.Counters{
			ResetsSent:     d.OutRsts,
			ResetsReceived: sub(d.EstabResets, d.Aborts),
			Connects:       sub(d.ActiveOpens, d.AttemptFails),
			Accepts:        d.PassiveOpens,
			Retransmits:    d.RetransSegs,
		}
		c.ConnectFailures[bpf.FailOther] = d.AttemptFails
		out.counters[bpf.Key{Netns: ns, Side: bpf.SideApp}] = c
	}
	return out, nil
}

func (s *procSource) close() error { return nil }
