package dashboard

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/nodewise/nodewise/api/v1alpha1"
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
