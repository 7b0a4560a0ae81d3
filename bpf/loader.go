package bpf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
)

// Sides, as the programs write them into keys.
const (
	SideApp   = 0
	SideProxy = 1
)

// HistBuckets is the number of buckets of each latency histogram
// (HIST_BUCKETS in src/nodewise.c).
const HistBuckets = 32

// Connect failure classes: the index into Counters.ConnectFailures.
const (
	FailRefused = iota
	FailTimeout
	FailUnreachable
	FailReset
	FailOther
	FailClasses
)

// Key identifies the counters of one side of one network namespace.
type Key struct {
	Netns uint32
	Side  uint32
}

// Counters are the summed per-CPU counters of one Key.
type Counters struct {
	ResetsSent      uint64
	ResetsReceived  uint64
	Connects        uint64
	Accepts         uint64
	Retransmits     uint64
	ConnectFailures [FailClasses]uint64
	ConnectLatency  [HistBuckets]uint64
	SRTT            [HistBuckets]uint64
}

// Conn is one established socket: when it reached ESTABLISHED (monotonic
// nanoseconds, as bpf_ktime_get_ns) and whose it is.
type Conn struct {
	StartNs uint64
	Key     Key
}

// Probe is the loaded and attached set of programs. Close detaches them.
type Probe struct {
	objs  NodewiseObjects
	links []link.Link
	// slots is the far socket table, mapped into this process:
	// ReadConns scans it without a system call per entry, once the
	// programs have used it (farUsed).
	slots   *ebpf.Memory
	farUsed bool
	// buffers for ReadConns
	buf  []NodewiseSockSlot
	near *NodewiseNearTable
	// rows are the counter rows, mapped into this process: a row per
	// field and CPU, of blocks counters each.
	rows   *ebpf.Memory
	blocks uint32
	cpus   int
	// index is the key of every block handed out, read from
	// counter_index again only when more have been (indexed, the
	// programs' next_block then) or the last read found a gap.
	index   map[uint32]Key
	indexed uint32
}

// Load loads the programs into the kernel and attaches them. The error wraps
// ebpf.ErrNotSupported when the kernel lacks what they need.
func Load() (*Probe, error) {
	blocks, err := counterBlocks()
	if err != nil {
		return nil, err
	}
	spec, err := LoadNodewise()
	if err != nil {
		return nil, fmt.Errorf("reading the eBPF objects: %w", err)
	}
	return load(spec, blocks, nil)
}

// LoadBuild loads and attaches another build of src/nodewise.c, one with
// the production build's programs and maps and more (bpf/bench's timed
// build); opts carry the MapReplacements through which the caller reads
// the build's further maps.
func LoadBuild(spec *ebpf.CollectionSpec, opts *ebpf.CollectionOptions) (*Probe, error) {
	blocks, err := counterBlocks()
	if err != nil {
		return nil, err
	}
	return load(spec, blocks, opts)
}

// load loads and attaches the programs of spec with the given number of
// counter blocks.
func load(spec *ebpf.CollectionSpec, blocks uint32, opts *ebpf.CollectionOptions) (*Probe, error) {
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("removing the memlock limit: %w", err)
	}
	p := &Probe{}
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("counting possible CPUs: %w", err)
	}
	// A row per field and CPU, of fewer blocks than the object's: the
	// value's type no longer matches its size, so the map goes without
	// BTF.
	rows := spec.Maps["counter_rows"]
	rows.MaxEntries = uint32(counterFields * cpus)
	rows.ValueSize = blocks * 8
	rows.Key, rows.Value = nil, nil
	spec.Maps["counter_index"].MaxEntries = blocks
	if err := spec.Variables["counter_blocks_n"].Set(blocks); err != nil {
		return nil, fmt.Errorf("setting the counter blocks: %w", err)
	}
	p.blocks, p.cpus = blocks, cpus
	if err := spec.LoadAndAssign(&p.objs, opts); err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("loading eBPF objects (verifier): %+v", verr)
		}
		return nil, fmt.Errorf("loading eBPF objects: %w", err)
	}
	for _, prog := range []*ebpf.Program{
		p.objs.TcpSendReset, p.objs.TcpReceiveReset, p.objs.TcpRetransmitSkb, p.objs.InetSockSetState,
	} {
		l, err := link.AttachTracing(link.TracingOptions{Program: prog})
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("attaching %s: %w", prog, err)
		}
		p.links = append(p.links, l)
	}
	if p.slots, err = p.objs.SockSlots.Memory(); err != nil {
		p.Close()
		return nil, fmt.Errorf("mapping the socket table: %w", err)
	}
	if p.rows, err = p.objs.CounterRows.Memory(); err != nil {
		p.Close()
		return nil, fmt.Errorf("mapping the counter rows: %w", err)
	}
	return p, nil
}

// counterBlockBudget bounds the kernel memory of the per-CPU counter
// blocks, which are preallocated for every possible CPU.
const counterBlockBudget = 16 << 20

// counterBlocks is how many (namespace, side) keys get a block, a column
// of the per-CPU counter rows (the fast path), within the budget: 1,024 on
// up to 27 CPUs, 295 on 96, never fewer than 64. Further keys count in the
// per-CPU hash.
func counterBlocks() (uint32, error) {
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return 0, fmt.Errorf("counting possible CPUs: %w", err)
	}
	n := counterBlockBudget / (int(unsafe.Sizeof(NodewiseSockCounters{})) * cpus)
	return uint32(min(max(n, 64), 1024)), nil
}

// counterFields is how many counters a key has: the rows of counter_rows,
// in the order of the fields of Counters (and of struct sock_counters).
const counterFields = int(unsafe.Sizeof(Counters{}) / 8)

// fields gives the counters of c in the order of the rows.
func (c *Counters) fields() *[counterFields]uint64 {
	return (*[counterFields]uint64)(unsafe.Pointer(c))
}

// Close detaches the programs and frees the maps.
func (p *Probe) Close() error {
	var errs []error
	for _, l := range p.links {
		errs = append(errs, l.Close())
	}
	p.links = nil
	errs = append(errs, p.objs.Close())
	return errors.Join(errs...)
}

// Programs returns the attached programs by name, for their run statistics.
func (p *Probe) Programs() map[string]*ebpf.Program {
	return map[string]*ebpf.Program{
		NodewiseProgTcpSendReset:     p.objs.TcpSendReset,
		NodewiseProgTcpReceiveReset:  p.objs.TcpReceiveReset,
		NodewiseProgTcpRetransmitSkb: p.objs.TcpRetransmitSkb,
		NodewiseProgInetSockSetState: p.objs.InetSockSetState,
	}
}

// ReadCounters sums every CPU's counters and histograms of every key, from
// its block's column of the counter rows and from the hash of keys that
// found no block.
func (p *Probe) ReadCounters() (map[Key]*Counters, error) {
	out := map[Key]*Counters{}
	get := func(k Key) *Counters {
		c := out[k]
		if c == nil {
			c = &Counters{}
			out[k] = c
		}
		return c
	}
	var (
		ck  NodewiseCounterKey
		cvs []NodewiseSockCounters
	)
	if err := p.readIndex(); err != nil {
		return nil, err
	}
	if err := p.readRows(get); err != nil {
		return nil, err
	}
	iter := p.objs.Counters.Iterate()
	for iter.Next(&ck, &cvs) {
		addCounters(get(Key{Netns: ck.Netns, Side: ck.Side}), cvs)
	}
	if err := iter.Err(); err != nil {
		return nil, fmt.Errorf("reading the counters map: %w", err)
	}
	return out, nil
}

// readIndex brings p.index up to date with the blocks the programs have
// handed out. Blocks are never taken back, so it reads counter_index (a
// system call per key) only when next_block has moved since, or when the
// last read found fewer keys than blocks handed out: a key whose entry
// was still being written then, or a block a race left unused.
func (p *Probe) readIndex() error {
	var zero, next uint32
	if err := p.objs.NextBlock.Lookup(&zero, &next); err != nil {
		return fmt.Errorf("reading the next counter block: %w", err)
	}
	next = min(next, p.blocks)
	if p.index != nil && next == p.indexed && uint32(len(p.index)) == next {
		return nil
	}
	var (
		ck    NodewiseCounterKey
		block uint32
		index = map[uint32]Key{}
		iter  = p.objs.CounterIndex.Iterate()
	)
	for iter.Next(&ck, &block) {
		if block < p.blocks {
			index[block] = Key{Netns: ck.Netns, Side: ck.Side}
		}
	}
	if err := iter.Err(); err != nil {
		return fmt.Errorf("reading the counter index: %w", err)
	}
	p.index, p.indexed = index, next
	return nil
}

// readRows adds every CPU's counters of the blocks in use (p.index), read
// from the mapped rows, to their keys' counters, found with get.
func (p *Probe) readRows(get func(Key) *Counters) error {
	if len(p.index) == 0 {
		return nil
	}
	type column struct {
		off int
		c   *[counterFields]uint64
	}
	cols := make([]column, 0, len(p.index))
	var last uint32
	for b, k := range p.index {
		last = max(last, b)
		cols = append(cols, column{int(b) * 8, get(k).fields()})
	}
	buf := make([]byte, (last+1)*8)
	rowBytes := int64(p.blocks) * 8
	for cpu := range p.cpus {
		for f := range counterFields {
			if _, err := p.rows.ReadAt(buf, int64(cpu*counterFields+f)*rowBytes); err != nil {
				return fmt.Errorf("reading counter row %d of CPU %d: %w", f, cpu, err)
			}
			for _, col := range cols {
				col.c[f] += binary.NativeEndian.Uint64(buf[col.off:])
			}
		}
	}
	return nil
}

// addCounters adds per-CPU values to c.
func addCounters(c *Counters, cvs []NodewiseSockCounters) {
	for _, v := range cvs {
		c.ResetsSent += v.ResetsSent
		c.ResetsReceived += v.ResetsReceived
		c.Connects += v.Connects
		c.Accepts += v.Accepts
		c.Retransmits += v.Retransmits
		for i := range c.ConnectFailures {
			c.ConnectFailures[i] += v.ConnectFailures[i]
		}
		for i := range c.ConnectLatency {
			c.ConnectLatency[i] += v.ConnectLatency[i]
			c.SRTT[i] += v.Srtt[i]
		}
	}
}

// ReadConns lists the established sockets the programs saw become
// established, from both levels of the socket table (the far one only once
// a socket has needed it). Not safe for concurrent use.
func (p *Probe) ReadConns() ([]Conn, error) {
	const slotSize = int(unsafe.Sizeof(NodewiseSockSlot{}))
	if p.near == nil {
		p.near = new(NodewiseNearTable)
		p.buf = make([]NodewiseSockSlot, (1<<16)/slotSize)
	}
	var zero uint32
	if err := p.objs.NearSlots.Lookup(&zero, p.near); err != nil {
		return nil, fmt.Errorf("reading the near socket table: %w", err)
	}
	out := appendConns(nil, p.near.Slot[:])
	if !p.farUsed {
		var used uint32
		if err := p.objs.FarUsed.Lookup(&zero, &used); err != nil {
			return nil, fmt.Errorf("reading whether the far socket table is in use: %w", err)
		}
		if used == 0 {
			return out, nil
		}
		p.farUsed = true
	}
	buf := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(p.buf))), len(p.buf)*slotSize)
	size := int64(p.slots.Size())
	for off := int64(0); off < size; off += int64(len(buf)) {
		n, err := p.slots.ReadAt(buf, off)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("reading the far socket table: %w", err)
		}
		out = appendConns(out, p.buf[:n/slotSize])
	}
	return out, nil
}

// appendConns appends the established sockets among slots to out. A slot
// being written concurrently may read torn: its address is set before its
// times and cleared after them, so a free slot or one not yet established
// reads as such.
func appendConns(out []Conn, slots []NodewiseSockSlot) []Conn {
	for _, s := range slots {
		if s.Sk == 0 || s.EstablishedNs == 0 {
			continue
		}
		out = append(out, Conn{StartNs: s.EstablishedNs, Key: Key{Netns: s.Netns, Side: uint32(s.Side)}})
	}
	return out
}

// MissedRuns is how many runs of the programs the kernel skipped because
// the same program was already running on that CPU (a softirq interrupting
// a system call's run): their events went uncounted. The kernel counts
// these whether or not run-time statistics are on.
func (p *Probe) MissedRuns() (uint64, error) {
	var sum uint64
	for name, prog := range p.Programs() {
		st, err := prog.Stats()
		if err != nil {
			return 0, fmt.Errorf("reading the statistics of %s: %w", name, err)
		}
		sum += st.RecursionMisses
	}
	return sum, nil
}

// EstablishedOverflow is how many established sockets found no free slot
// in the socket table (they are missing from the age buckets).
func (p *Probe) EstablishedOverflow() (uint64, error) {
	var vs []uint64
	if err := p.objs.EstablishedOverflow.Lookup(uint32(0), &vs); err != nil {
		return 0, fmt.Errorf("reading the overflow counter: %w", err)
	}
	var sum uint64
	for _, v := range vs {
		sum += v
	}
	return sum, nil
}

// ReadNetnsCgroups returns, by network namespace inode, the cgroup v2 ids
// of the processes seen connecting, listening or closing inside it.
func (p *Probe) ReadNetnsCgroups() (map[uint32][]uint64, error) {
	var (
		k    NodewiseNetnsOwner
		v    uint8
		out  = map[uint32][]uint64{}
		iter = p.objs.NetnsOwners.Iterate()
	)
	for iter.Next(&k, &v) {
		out[k.Netns] = append(out[k.Netns], k.Cgroup)
	}
	if err := iter.Err(); err != nil {
		return nil, fmt.Errorf("reading the namespace owners map: %w", err)
	}
	return out, nil
}
