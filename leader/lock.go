package leader

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	coordinationinformers "k8s.io/client-go/informers/coordination/v1"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// VersionAnnotation is written on a leader Lease by each write of its
// holder: the holder's build (Election.Version). The last writer of a Lease
// is its leader, so the annotation is the version of the process that holds
// it, which `nodewise version` prints as the running server's version.
const VersionAnnotation = "nodewise.io/version"

// stamp sets VersionAnnotation and AddressAnnotation on the Lease this
// replica writes (each only when this replica has one; an address a
// previous holder wrote is removed).
func (l *watchedLease) stamp(lease *coordinationv1.Lease) {
	if lease.Annotations == nil {
		lease.Annotations = map[string]string{}
	}
	if l.version != "" {
		lease.Annotations[VersionAnnotation] = l.version
	}
	delete(lease.Annotations, AddressAnnotation)
	if l.address != "" {
		lease.Annotations[AddressAnnotation] = l.address
	}
}

// watchedLease is the election's lock on one Lease. It reads the Lease from
// a watch of that Lease alone, so a standby costs the API server one watch
// rather than a GET every retry period; it writes (Create, Update) to the API
// as resourcelock.LeaseLock does. A cached copy that is behind makes the
// write fail with a Conflict, which the elector counts as one failed attempt
// and retries.
//
// Until the watch has synced, and while the cache has not yet shown this
// replica's own last write (the leader's slow path, a release), Get asks the
// API: a cached copy older than what this replica itself wrote would only
// lose it a renewal.
type watchedLease struct {
	client          coordinationv1client.LeasesGetter
	namespace, name string
	identity        string
	guard           *Guard // told of each successful write of this replica's record (nil: none)
	version         string // written on the Lease (VersionAnnotation)
	address         string // written on the Lease (AddressAnnotation)
	holders         *holderWatch
	informer        cache.SharedIndexInformer
	log             *zap.Logger
	mu              sync.Mutex
	lease           *coordinationv1.Lease // what the next Update starts from
	unseen          string                // resourceVersion of our last write, until the cache shows it
}

var _ resourcelock.Interface = (*watchedLease)(nil)

func newWatchedLease(c kubernetes.Interface, namespace, name, identity, version string, log *zap.Logger) *watchedLease {
	inf := coordinationinformers.NewFilteredLeaseInformer(c, namespace, 0, cache.Indexers{}, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	})
	l := &watchedLease{client: c.CoordinationV1(), namespace: namespace, name: name, identity: identity, version: version, informer: inf, log: log}
	_ = inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) || errors.Is(err, io.EOF) {
			log.Debug("the leader Lease's watch ended; watching again", zap.String("lease", l.Describe()), zap.Error(err))
			return
		}
		log.Warn("watching the leader Lease failed; reading it from the API until the watch recovers",
			zap.String("lease", l.Describe()), zap.Error(err))
	})
	seen := func(obj any) {
		if lease, ok := obj.(*coordinationv1.Lease); ok {
			l.mu.Lock()
			if lease.ResourceVersion == l.unseen {
				l.unseen = ""
			}
			l.mu.Unlock()
			if l.holders != nil {
				l.holders.follow(holder(lease), lease.Annotations[AddressAnnotation])
			}
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, obj any) { seen(obj) },
	})
	return l
}

// run watches the Lease until ctx ends.
func (l *watchedLease) run(ctx context.Context) { l.informer.RunWithContext(ctx) }

// Get returns the Lease's election record, from the cache when the cache is
// synced and has shown this replica's own last write, from the API
// otherwise. A Lease the cache does not hold is NotFound, so the elector
// creates it; if another replica created it first, the Create fails with
// AlreadyExists, one failed attempt, until the watch shows it.
func (l *watchedLease) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	l.mu.Lock()
	unseen := l.unseen
	l.mu.Unlock()
	var lease *coordinationv1.Lease
	if unseen == "" && l.informer.HasSynced() {
		obj, ok, err := l.informer.GetStore().GetByKey(l.namespace + "/" + l.name)
		if err != nil {
			return nil, nil, fmt.Errorf("reading the cached Lease %s: %w", l.Describe(), err)
		}
		if !ok {
			return nil, nil, apierrors.NewNotFound(coordinationv1.Resource("leases"), l.name)
		}
		lease = obj.(*coordinationv1.Lease).DeepCopy()
	} else {
		got, err := l.client.Leases(l.namespace).Get(ctx, l.name, metav1.GetOptions{})
		if err != nil {
			return nil, nil, err // NotFound must stay recognisable: the elector creates the Lease then
		}
		lease = got
		l.mu.Lock()
		if cached, ok, _ := l.informer.GetStore().GetByKey(l.namespace + "/" + l.name); ok && cached.(*coordinationv1.Lease).ResourceVersion == got.ResourceVersion {
			l.unseen = "" // the cache is current (a relist may have skipped our write's event)
		}
		l.mu.Unlock()
	}
	l.mu.Lock()
	l.lease = lease
	l.mu.Unlock()
	// The elector restarts its lease-duration clock whenever the raw record
	// changes. client-go's LeaseLock encodes the record, whose times have
	// whole seconds, so a standby misses renewals within the same second and
	// may take over up to a second early; the spec's times have microseconds,
	// so every renewal counts.
	record := resourcelock.LeaseSpecToLeaderElectionRecord(&lease.Spec)
	raw, err := json.Marshal(lease.Spec)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding the election record of %s: %w", l.Describe(), err)
	}
	if l.holders != nil && l.holders.isGone(record.HolderIdentity) {
		// The holder's process is gone (holderWatch): the record is given
		// to the elector as one whose time ran out a second before it was
		// observed, and changed, so that the elector observes it anew. Its
		// takeover is still an Update conditional on the Lease read here.
		record.LeaseDurationSeconds = -1
		raw = append(raw, " holder gone"...)
	}
	return record, raw, nil
}

// Create creates the Lease with this record.
func (l *watchedLease) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: l.name, Namespace: l.namespace},
		Spec:       resourcelock.LeaderElectionRecordToLeaseSpec(&ler),
	}
	sent := l.guard.Now()
	l.stamp(lease)
	created, err := l.client.Leases(l.namespace).Create(ctx, lease, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	l.wrote(created, sent)
	return nil
}

// Update writes this record over the Lease last read or written, with that
// copy's resourceVersion. A release (a record held by nobody) is written only
// over a copy this replica holds: client-go's release decides from the
// record it last observed, and after a conflict retries over a fresh read,
// which would otherwise clear the Lease of the replica that took over.
func (l *watchedLease) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	l.mu.Lock()
	if l.lease == nil {
		l.mu.Unlock()
		return fmt.Errorf("updating the Lease %s before reading or creating it", l.Describe())
	}
	lease := l.lease.DeepCopy()
	l.mu.Unlock()
	if ler.HolderIdentity != l.identity && holder(lease) != l.identity {
		return fmt.Errorf("not releasing the Lease %s: %q holds it, not %q", l.Describe(), holder(lease), l.identity)
	}
	lease.Spec = resourcelock.LeaderElectionRecordToLeaseSpec(&ler)
	sent := l.guard.Now()
	l.stamp(lease)
	updated, err := l.client.Leases(l.namespace).Update(ctx, lease, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	l.wrote(updated, sent)
	return nil
}

func holder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// wrote keeps the Lease a write of this replica's sent at sent returned, and
// tells the guard whether this replica now holds it.
func (l *watchedLease) wrote(lease *coordinationv1.Lease, sent time.Time) {
	if holder(lease) == l.identity {
		l.guard.Renewed(sent)
	} else {
		l.guard.Lost()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lease = lease
	l.unseen = lease.ResourceVersion
	if obj, ok, _ := l.informer.GetStore().GetByKey(l.namespace + "/" + l.name); ok && obj.(*coordinationv1.Lease).ResourceVersion == lease.ResourceVersion {
		l.unseen = "" // the watch was quicker than the response
	}
}

// RecordEvent records nothing: nodewise logs leadership changes instead.
func (l *watchedLease) RecordEvent(string) {}

// Identity is this replica's identity.
func (l *watchedLease) Identity() string { return l.identity }

// Describe names the Lease.
func (l *watchedLease) Describe() string { return l.namespace + "/" + l.name }
