package dashboard

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodewise/nodewise/api/v1alpha1"
	"github.com/nodewise/nodewise/health/wire"
)

// fakeRollouts is an in-memory NodeRollout resource that counts its
// watches, records patches and can refuse them.
type fakeRollouts struct {
	mu       sync.Mutex
	rv       int
	items    map[string]*v1alpha1.NodeRollout
	watchers []*watch.RaceFreeFakeWatcher
	watches  atomic.Int32
	patches  []string
	patchErr error
}

func newFakeRollouts(nrs ...*v1alpha1.NodeRollout) *fakeRollouts {
	f := &fakeRollouts{items: map[string]*v1alpha1.NodeRollout{}}
	for _, nr := range nrs {
		f.put(nr)
	}
	return f
}

// put stores nr and tells every watcher.
func (f *fakeRollouts) put(nr *v1alpha1.NodeRollout) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rv++
	nr = nr.DeepCopy()
	nr.ResourceVersion = strconv.Itoa(f.rv)
	_, had := f.items[nr.Name]
	f.items[nr.Name] = nr
	for _, w := range f.watchers {
		if had {
			w.Modify(nr.DeepCopy())
		} else {
			w.Add(nr.DeepCopy())
		}
	}
}

func (f *fakeRollouts) List(context.Context, metav1.ListOptions) (*v1alpha1.NodeRolloutList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := &v1alpha1.NodeRolloutList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(f.rv)}}
	for _, nr := range f.items {
		l.Items = append(l.Items, *nr.DeepCopy())
	}
	return l, nil
}

func (f *fakeRollouts) Watch(_ context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if opts.SendInitialEvents != nil {
		return nil, errors.New("watch-list not supported") // the reflector lists instead
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.watches.Add(1)
	w := watch.NewRaceFreeFake()
	f.watchers = append(f.watchers, w)
	return w, nil
}

func (f *fakeRollouts) Patch(_ context.Context, name string, _ types.PatchType, data []byte, _ metav1.PatchOptions, _ ...string) (*v1alpha1.NodeRollout, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.patchErr != nil {
		return nil, f.patchErr
	}
	f.patches = append(f.patches, name+" "+string(data))
	return f.items[name], nil
}

// fakeMigrations is the same for RevisionMigrations (read only).
type fakeMigrations struct {
	items   []v1alpha1.RevisionMigration
	watches atomic.Int32
}

func (f *fakeMigrations) List(context.Context, metav1.ListOptions) (*v1alpha1.RevisionMigrationList, error) {
	return &v1alpha1.RevisionMigrationList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}, Items: f.items}, nil
}

func (f *fakeMigrations) Watch(_ context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if opts.SendInitialEvents != nil {
		return nil, errors.New("watch-list not supported")
	}
	f.watches.Add(1)
	return watch.NewRaceFreeFake(), nil
}

func forbidden() error {
	return apierrors.NewForbidden(schema.GroupResource{Group: "nodewise.io", Resource: "noderollouts"}, "faulty", errors.New(`User "viewer" cannot patch resource "noderollouts"`))
}

// fakeHistory is the node agents' history: scripted answers by node, an
// error for some, and a count of the reads.
type fakeHistory struct {
	mu    sync.Mutex
	hist  map[string]wire.History
	errs  map[string]error
	reads map[string]int
}

func (f *fakeHistory) History(_ context.Context, node string, since time.Time) (wire.History, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.reads == nil {
		f.reads = map[string]int{}
	}
	f.reads[node]++
	if err := f.errs[node]; err != nil {
		return wire.History{}, err
	}
	h, ok := f.hist[node]
	if !ok {
		return wire.History{}, errors.New("dial tcp: no route to host")
	}
	var kept []wire.Snapshot
	for _, s := range h.Snapshots {
		if !s.Time.Before(since) {
			kept = append(kept, s)
		}
	}
	h.Snapshots = kept
	return h, nil
}

func (f *fakeHistory) readsOf(node string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads[node]
}

// historyEvery is how often the fake agents keep a snapshot.
const historyEvery = 5 * time.Second

// haltedHistory is the agents' history behind haltedRollout's judgement of
// node-001 (baseline t0 to t0+1m, swap to t0+2m, soak to t0+3m): on
// node-001 from the swap on, default/web-1's resets go from 0.2/s to 4/s,
// its failed connects from none to 0.2/s and its connect latency from 1–2
// ms to 4–8 ms, and the probe's resets from none to 0.6/s; its control
// nodes node-002 and node-003 stay as they were. Answered at t0+5m.
func haltedHistory() *fakeHistory {
	f := &fakeHistory{hist: map[string]wire.History{}}
	for node, regress := range map[string]bool{"node-001": true, "node-002": false, "node-003": false} {
		f.hist[node] = agentHistoryOf(node, regress)
	}
	return f
}

func agentHistoryOf(node string, regress bool) wire.History {
	start, now, swap := t0.Add(-2*time.Minute), t0.Add(5*time.Minute), t0.Add(time.Minute)
	pods := []wire.PodCounters{
		{Namespace: "default", Name: "web-1", UID: node + "-web-1", Side: wire.SideApp},
		{Namespace: "default", Name: "web-2", UID: node + "-web-2", Side: wire.SideApp},
		{Namespace: "nodewise-probe", Name: "probe-x", UID: node + "-probe", Side: wire.SideApp},
	}
	for i := range pods {
		pods[i].ConnectLatency.Buckets = make([]uint64, wire.Log2Buckets)
		pods[i].ConnectFailures = map[wire.ConnectErrorClass]uint64{}
	}
	h := wire.History{Node: node, StartTime: start, Now: now, Every: historyEvery, Keep: time.Hour}
	for at := start; !at.After(now); at = at.Add(historyEvery) {
		after := regress && at.After(swap)
		if at.After(start) { // what the last 5 s counted
			web1, web2, probe := &pods[0], &pods[1], &pods[2]
			web1.Connects += 100
			web2.Connects += 50
			probe.Connects += 10
			web1.ResetsReceived++
			latency := 10 // 1–2 ms
			if after {
				web1.ResetsReceived += 10
				web1.ResetsSent += 9
				web1.ConnectFailures[wire.ConnectRefused]++
				probe.ResetsSent += 3
				latency = 12 // 4–8 ms
			}
			web1.ConnectLatency.Buckets[latency] += 100
			web2.ConnectLatency.Buckets[latency] += 50
			probe.ConnectLatency.Buckets[latency] += 10
		}
		snap := wire.Snapshot{Node: node, Time: at, StartTime: start}
		for _, p := range pods {
			p.ConnectLatency.Buckets = slices.Clone(p.ConnectLatency.Buckets)
			p.ConnectFailures = maps.Clone(p.ConnectFailures)
			snap.Pods = append(snap.Pods, p)
		}
		h.Snapshots = append(h.Snapshots, snap)
	}
	return h
}
