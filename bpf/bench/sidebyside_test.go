package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/nodewise/nodewise/bpf"
	"github.com/nodewise/nodewise/test/netrig"
)

// roundsEnv sets BenchmarkBuildsSideBySide's rounds (4 by default).
const roundsEnv = "NODEWISE_EBPF_ROUNDS"

// buildsEnv names the builds BenchmarkBuildsSideBySide compares with the
// production one: paths of objects compiled from variants of
// src/nodewise.c (hack/ebpf-variant.sh), separated by spaces.
const buildsEnv = "NODEWISE_EBPF_BUILDS"

// BenchmarkBuildsSideBySide is make bench-ebpf-ab: the production build
// twice (the control: two identical copies differ only by the noise) and
// every build of NODEWISE_EBPF_BUILDS, attached together with the
// accounting floor to inet_sock_set_state, so that all of them run on the
// same events, under the churn of make bench-ebpf (110 pod namespaces,
// 20,000 new connections/s offered). Each round (NODEWISE_EBPF_ROUNDS, 4
// by default) attaches them in turn, the order reversed every other round
// (the first program a tracepoint runs pays for the lines the others then
// find in cache), and prints each build's mean run from the kernel's
// statistics and its ratio to the floor's; the last line gives each
// build's mean ratio over the rounds. From one run of make bench-ebpf to
// the next on a shared machine the same programs' ratio moves by a
// quarter; side by side, the two copies agree within about 0.05, so this
// is how a change to the programs is measured.
//
//	ebpf-ab round=… rate=… floor_ns=… production=ns(ratio) production-copy=ns(ratio) <build>=ns(ratio) …
//	ebpf-ab mean production=ratio production-copy=ratio <build>=ratio …
func BenchmarkBuildsSideBySide(b *testing.B) {
	netrig.RequireKernel(b)
	rounds := 4
	if v := os.Getenv(roundsEnv); v != "" {
		if _, err := fmt.Sscan(v, &rounds); err != nil || rounds < 1 {
			b.Fatalf("%s=%q: want a positive number of rounds", roundsEnv, v)
		}
	}
	type build struct {
		name string
		spec func() (*ebpf.CollectionSpec, error)
	}
	builds := []build{{"production", bpf.LoadNodewise}, {"production-copy", bpf.LoadNodewise}}
	for _, path := range strings.Fields(os.Getenv(buildsEnv)) {
		builds = append(builds, build{strings.TrimSuffix(filepath.Base(path), ".o"), func() (*ebpf.CollectionSpec, error) {
			return ebpf.LoadCollectionSpec(path)
		}})
	}
	pods := netrig.New(b).AddEchoPods("ebpf", 110, 8080)
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		b.Fatalf("enabling BPF run-time stats: %v", err)
	}
	defer stats.Close()
	specs := make([]func() (*ebpf.CollectionSpec, error), len(builds))
	for i, bd := range builds {
		specs[i] = bd.spec
	}
	ratios := make([]float64, len(builds))
	for round := range rounds * b.N {
		order := make([]int, len(builds))
		for i := range order {
			order[i] = i
			if round%2 == 1 {
				order[i] = len(builds) - 1 - i
			}
		}
		means, floorNs, rate := sideBySide(b, pods, specs, order)
		line := fmt.Sprintf("ebpf-ab round=%d rate=%.0f floor_ns=%.1f", round, rate, floorNs)
		for _, i := range order {
			line += fmt.Sprintf(" %s=%.1f(%.2f)", builds[i].name, means[i], means[i]/floorNs)
			ratios[i] += means[i] / floorNs / float64(rounds*b.N)
		}
		fmt.Println(line)
	}
	line := "ebpf-ab mean"
	for i, bd := range builds {
		line += fmt.Sprintf(" %s=%.2f", bd.name, ratios[i])
		b.ReportMetric(ratios[i], bd.name+"-ratio")
	}
	fmt.Println(line)
}

// sideBySide attaches the floor, then the builds in order, warms them up
// for a second and returns each build's mean state-program run (indexed as
// builds), the floor's and the rate achieved over the next 3 s of churn.
func sideBySide(b *testing.B, pods []*netrig.Pod, builds []func() (*ebpf.CollectionSpec, error), order []int) (means []float64, floorNs, rate float64) {
	floor, err := attachFloor()
	if err != nil {
		b.Fatal(err)
	}
	defer floor.Close()
	progs := make([]*ebpf.Program, len(builds))
	for _, i := range order {
		s, err := builds[i]()
		if err != nil {
			b.Fatalf("reading build %d: %v", i, err)
		}
		p, err := bpf.LoadBuild(s, nil)
		if err != nil {
			b.Fatalf("loading build %d: %v", i, err)
		}
		defer p.Close()
		progs[i] = p.Programs()[bpf.NodewiseProgInetSockSetState]
	}
	read := func(p *ebpf.Program) ebpf.ProgramStats {
		st, err := p.Stats()
		if err != nil {
			b.Fatalf("reading program statistics: %v", err)
		}
		return *st
	}
	mean := func(before, after ebpf.ProgramStats) float64 {
		return float64(after.Runtime-before.Runtime) / float64(max(after.RunCount-before.RunCount, 1))
	}
	netrig.Churn(pods, 8080, 20000, time.Second) // warm up
	before := make([]ebpf.ProgramStats, len(builds))
	for i, p := range progs {
		before[i] = read(p)
	}
	fb := read(floor.prog)
	l := netrig.Churn(pods, 8080, 20000, 3*time.Second)
	fa := read(floor.prog)
	means = make([]float64, len(builds))
	for i, p := range progs {
		means[i] = mean(before[i], read(p))
	}
	return means, mean(fb, fa), l.Rate()
}
