package sidecar

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/istio"
)

// fakeAgents stands in for the node agents of the simulated cluster: each
// pod on a node opens connections at a steady rate, and its resets and
// connect latency follow its proxy's image tag (a "-rst" proxy resets 30% of
// its connections, as the live rig's stand-ins do; a pod without a sidecar
// follows its namespace's waypoint and weighted canary waypoint) and a cluster-wide factor
// a test can change (a traffic change every pod sees).
type fakeAgents struct {
	cs    kubernetes.Interface
	start time.Time

	mu     sync.Mutex
	surge  bool
	pods   map[string]*fakePod // by UID
	served int
}

type fakePod struct {
	last time.Time
	c    wire.PodCounters
	// carry keeps the fractions of events between snapshots.
	carryConn, carryRst float64
}

const (
	fakeConnectsPerSecond = 100
	healthyResetShare     = 0.002
	faultyResetShare      = 0.3
)

func newFakeAgents(cs kubernetes.Interface) *fakeAgents {
	return &fakeAgents{cs: cs, start: time.Now(), pods: map[string]*fakePod{}}
}

// setSurge makes every pod, migrated or not, reset 20 times more and connect
// four times slower (or back).
func (f *fakeAgents) setSurge(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.surge = on
}

func (f *fakeAgents) Snapshot(ctx context.Context, node string) (wire.Snapshot, error) {
	pods, err := f.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return wire.Snapshot{}, err
	}
	// An ambient pod's L7 proxy is its namespace's waypoint (istio.io/use-waypoint),
	// or for the share of connections its istio.io/use-waypoint-canary-weight
	// says, the canary waypoint: a "-rst" waypoint resets the connections
	// it carries.
	wps, err := f.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: "gateway.istio.io/managed=istio.io-mesh-controller"})
	if err != nil {
		return wire.Snapshot{}, err
	}
	faultyWaypoint := map[string]bool{} // by namespace/gateway, and by namespace
	for i := range wps.Items {
		if p := &wps.Items[i]; p.DeletionTimestamp == nil && strings.HasSuffix(proxyTag(p), "-rst") {
			faultyWaypoint[p.Namespace+"/"+p.Labels[istio.LabelK8sGatewayName]] = true
			faultyWaypoint[p.Namespace] = true
		}
	}
	nss, err := f.cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return wire.Snapshot{}, err
	}
	// faultyShare is the share of an ambient namespace's connections that a
	// faulty waypoint carries.
	faultyShare := map[string]float64{}
	for _, n := range nss.Items {
		at := func(key string) string {
			if v := n.Labels[key]; v != "" {
				return v
			}
			return n.Name
		}
		primary, canary := n.Labels[istio.LabelUseWaypoint], n.Labels[istio.LabelUseWaypointCanary]
		if primary == "" {
			if faultyWaypoint[n.Name] {
				faultyShare[n.Name] = 1
			}
			continue
		}
		w := 0.0
		if canary != "" {
			if v, err := strconv.Atoi(n.Annotations[istio.AnnotationUseWaypointCanaryWeight]); err == nil && v >= 0 && v <= 100 {
				w = float64(v) / 100
			}
		}
		if faultyWaypoint[at(istio.LabelUseWaypointNamespace)+"/"+primary] {
			faultyShare[n.Name] += 1 - w
		}
		if canary != "" && faultyWaypoint[at(istio.LabelUseWaypointCanaryNamespace)+"/"+canary] {
			faultyShare[n.Name] += w
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.served++
	now := time.Now()
	snap := wire.Snapshot{Node: node, Time: now, Mode: wire.ModeEBPF, AgentVersion: "fake", StartTime: f.start}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || strings.HasPrefix(p.Namespace, "kube-") || p.Namespace == "istio-system" {
			continue
		}
		fp := f.pods[string(p.UID)]
		if fp == nil {
			fp = &fakePod{last: now, c: wire.PodCounters{Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), Side: wire.SideApp,
				ConnectLatency: wire.Log2Histogram{Buckets: make([]uint64, wire.Log2Buckets)}, SRTT: wire.Log2Histogram{Buckets: make([]uint64, wire.Log2Buckets)},
				ConnAges: make([]uint64, len(wire.AgeBucketBoundsSeconds)+1)}}
			f.pods[string(p.UID)] = fp
		}
		dt := now.Sub(fp.last).Seconds()
		fp.last = now
		share, bucket := healthyResetShare, 10 // about 1 ms
		switch tag := proxyTag(p); {
		case strings.HasSuffix(tag, "-rst"):
			share = faultyResetShare
		case tag == "":
			f := faultyShare[p.Namespace]
			share = (1-f)*healthyResetShare + f*faultyResetShare
		}
		if f.surge {
			share, bucket = share*20, 12
		}
		fp.carryConn += dt * fakeConnectsPerSecond
		n := uint64(fp.carryConn)
		fp.carryConn -= float64(n)
		fp.carryRst += float64(n) * share
		r := uint64(fp.carryRst)
		fp.carryRst -= float64(r)
		fp.c.Connects += n
		fp.c.ConnectLatency.Buckets[bucket] += n
		fp.c.ResetsReceived += r
		snap.Pods = append(snap.Pods, fp.c)
		snap.Pods[len(snap.Pods)-1].ConnectLatency.Buckets = append([]uint64(nil), fp.c.ConnectLatency.Buckets...)
	}
	return snap, nil
}

func proxyTag(p *corev1.Pod) string {
	for _, c := range p.Spec.Containers {
		if c.Name == "istio-proxy" {
			return c.Image[strings.LastIndex(c.Image, ":")+1:]
		}
	}
	return ""
}
