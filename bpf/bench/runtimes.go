package bench

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/nodewise/nodewise/bpf"
)

// The buckets of the timed build's histograms (RUNPROF_* in
// src/nodewise.c).
const (
	runFineBuckets = 1024
	runBuckets     = runFineBuckets + 64
)

// RunTimes counts program runs by duration: bucket i < 1024 holds runs of
// [2i, 2i+2) ns, bucket 1024+k runs of [2^k, 2^(k+1)) ns.
type RunTimes []uint64

// Probe is the timed build, loaded and attached: a bpf.Probe (it counts
// like the production build) whose state program also times its runs.
type Probe struct {
	*bpf.Probe
	runNs *ebpf.Map
}

// LoadTimed loads and attaches the timed build, whose state program files
// each run's duration (read with bpf_ktime_get_ns at its entry and exit)
// into a histogram: the distribution the kernel's mean hides. The timing
// adds a clock read to every run.
func LoadTimed() (*Probe, error) {
	spec, err := LoadNodewiseRunprof()
	if err != nil {
		return nil, fmt.Errorf("reading the timed build: %w", err)
	}
	runNs, err := ebpf.NewMap(spec.Maps["run_ns"])
	if err != nil {
		return nil, fmt.Errorf("creating the run-time histogram: %w", err)
	}
	p, err := bpf.LoadBuild(spec, &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{"run_ns": runNs}})
	if err != nil {
		runNs.Close()
		return nil, err
	}
	return &Probe{Probe: p, runNs: runNs}, nil
}

// RunTimes returns the durations of the state program's runs so far.
func (p *Probe) RunTimes() (RunTimes, error) { return readRunTimes(p.runNs) }

// Close detaches the programs and frees the maps.
func (p *Probe) Close() error { return errors.Join(p.Probe.Close(), p.runNs.Close()) }

// TimeEmptyRuns attaches an empty program timed the same way to the state
// program's hook while work runs, and returns its runs' durations: what
// the timing itself adds to a run.
func TimeEmptyRuns(work func()) (RunTimes, error) {
	spec, err := LoadNodewiseRunprof()
	if err != nil {
		return nil, err
	}
	var objs struct {
		Prog *ebpf.Program `ebpf:"empty_timed"`
		Hist *ebpf.Map     `ebpf:"empty_run_ns"`
	}
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return nil, fmt.Errorf("loading the empty timed program: %w", err)
	}
	defer objs.Prog.Close()
	defer objs.Hist.Close()
	l, err := link.AttachTracing(link.TracingOptions{Program: objs.Prog})
	if err != nil {
		return nil, fmt.Errorf("attaching the empty timed program: %w", err)
	}
	work()
	l.Close()
	return readRunTimes(objs.Hist)
}

func readRunTimes(m *ebpf.Map) (RunTimes, error) {
	h := make(RunTimes, runBuckets)
	var per []uint64
	for i := range h {
		if err := m.Lookup(uint32(i), &per); err != nil {
			return nil, fmt.Errorf("reading run-time bucket %d: %w", i, err)
		}
		for _, n := range per {
			h[i] += n
		}
	}
	return h, nil
}

// Count is the number of runs.
func (h RunTimes) Count() uint64 {
	var n uint64
	for _, c := range h {
		n += c
	}
	return n
}

// Add adds other's runs to h.
func (h RunTimes) Add(other RunTimes) RunTimes {
	if h == nil {
		h = make(RunTimes, len(other))
	}
	for i := range other {
		h[i] += other[i]
	}
	return h
}

// bucketBounds gives the durations bucket i holds, in ns.
func bucketBounds(i int) (lo, hi float64) {
	if i < runFineBuckets {
		return float64(2 * i), float64(2*i + 2)
	}
	k := i - runFineBuckets
	return math.Ldexp(1, k), math.Ldexp(1, k+1)
}

// Quantile estimates the q-quantile duration, interpolating within its
// bucket.
func (h RunTimes) Quantile(q float64) time.Duration {
	rank := q * float64(h.Count())
	var seen float64
	for i, c := range h {
		if c == 0 {
			continue
		}
		if seen+float64(c) >= rank {
			lo, hi := bucketBounds(i)
			return time.Duration(lo + (hi-lo)*(rank-seen)/float64(c))
		}
		seen += float64(c)
	}
	return 0
}
