package freshness

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/nodewise/nodewise/istio"
	"github.com/nodewise/nodewise/istio/inventory"
)

// bigFleet is 50,000 sidecar pods in 2,000 namespaces of 20 teams: five
// Deployments a namespace, five pods and ten ReplicaSets each.
func bigFleet() *fleet {
	f := &fleet{}
	f.istiod("1-28", "1.28.1", "default")
	f.istiod("1-27", "1.27.3")
	for n := range 2000 {
		ns := fmt.Sprintf("ns-%04d", n)
		f.namespace(ns, map[string]string{istio.LabelRev: "default", "team": fmt.Sprintf("team-%02d", n%20)})
		for d := range 5 {
			var restarts []time.Duration
			for r := range 10 {
				restarts = append(restarts, time.Duration(100-r*(d+1))*24*time.Hour)
			}
			f.deployment(ns, fmt.Sprintf("app-%d", d), nil, 5, []string{"1.27.3", "1.28.1"}[d%2], restarts...)
		}
	}
	return f
}

// BenchmarkFreshness50kPods prints the cost of one freshness report of
// 50,000 pods in 2,000 namespaces beside the inventory's own (which the
// report builds first): one `freshness pods=… namespaces=… inventory_ms=…
// inventory_mib=… freshness_ms=… freshness_mib=…` line, time and allocated
// memory per build.
func BenchmarkFreshness50kPods(b *testing.B) {
	f := bigFleet()
	measure := func(build func()) (time.Duration, float64) {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		build()
		d := time.Since(start)
		runtime.ReadMemStats(&after)
		return d, float64(after.TotalAlloc-before.TotalAlloc) / (1 << 20)
	}
	var invD, frD time.Duration
	var invM, frM float64
	for range b.N {
		d, m := measure(func() {
			if _, err := inventory.Build(inventory.Options{}, f.o.Objects); err != nil {
				b.Fatal(err)
			}
		})
		invD, invM = invD+d, invM+m
		d, m = measure(func() {
			r, err := Build(inventory.Options{}, f.o, Target{MaxMinorsBehind: 0}, Keys{}, now)
			if err != nil || r.Fleet.Pods != 50000 || len(r.Namespaces) != 2000 || len(r.Teams) != 20 {
				b.Fatalf("report of %d pods, %d namespaces, %d teams (%v)", r.Fleet.Pods, len(r.Namespaces), len(r.Teams), err)
			}
		})
		frD, frM = frD+d, frM+m
	}
	n := time.Duration(b.N)
	fmt.Printf("freshness pods=50000 namespaces=2000 inventory_ms=%.1f inventory_mib=%.1f freshness_ms=%.1f freshness_mib=%.1f\n",
		float64(invD/n)/1e6, invM/float64(b.N), float64(frD/n)/1e6, frM/float64(b.N))
}
