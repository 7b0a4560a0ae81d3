package locks

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Kured's lock, as kubereboot/kured pkg/daemonsetlock writes and reads it.
// With --concurrency 1 the annotation is one lock:
//
//	{"nodeID":"node-3","metadata":{"unschedulable":false},"created":"2026-12-04T19:00:00Z","TTL":0}
//
// and above 1 a multi-lock: {"maxOwners":2,"locks":[<lock>, …]}. A lock
// expires once TTL (nanoseconds, 0: never) has passed since created; Kured's
// Acquire overwrites an expired lock, and fills a multi-lock while it has
// fewer than maxOwners entries (dropping expired ones once it is full).

// KuredHolderPrefix starts every holder nodewise writes in Kured's lock: a
// name no Kured pod has, since Kured's Acquire treats a lock naming its own
// node as its own (and would reboot that node).
const KuredHolderPrefix = "nodewise:"

// KuredHolder is the holder a rollout writes in Kured's lock.
func KuredHolder(rollout string) string { return KuredHolderPrefix + rollout }

// KuredValue is one lock, Kured's LockAnnotationValue; nodewise adds the
// nodes it has in flight to the metadata (Kured ignores the field).
type KuredValue struct {
	NodeID   string        `json:"nodeID"`
	Metadata KuredMeta     `json:"metadata,omitempty"`
	Created  time.Time     `json:"created"`
	TTL      time.Duration `json:"TTL"`
}

// KuredMeta is Kured's NodeMeta plus nodewise's in-flight nodes.
type KuredMeta struct {
	Unschedulable bool     `json:"unschedulable"`
	Nodes         []string `json:"nodes,omitempty"`
}

type kuredMultiLock struct {
	MaxOwners int          `json:"maxOwners"`
	Locks     []KuredValue `json:"locks"`
}

func (v KuredValue) expired(now time.Time) bool {
	return v.TTL > 0 && now.Sub(v.Created) >= v.TTL
}

// ours: the entry is this holder's (a multi-lock holds it several times:
// holder, holder#2, …).
func ours(id, holder string) bool {
	return id == holder || strings.HasPrefix(id, holder+"#")
}

// ErrKuredHolds is returned when Kured (or another rollout) holds the lock
// nodewise needs.
var ErrKuredHolds = errors.New("Kured's lock is held")

// KuredChange is what TakeKured decided: Write the annotation with
// Value, or Remove it, or neither (the lock is as it should be).
type KuredChange struct {
	Write, Remove bool
	Value         string
}

// KuredWant is what a rollout wants of Kured's lock now.
type KuredWant struct {
	Holder string
	// Nodes in flight; none: release.
	Nodes []string
	// MaxOwners is Kured's --concurrency (from its DaemonSet), which decides
	// the format when there is no annotation yet; a multi-lock is filled up
	// to the larger of it and the lock's own maxOwners.
	MaxOwners int
	TTL       time.Duration
	Now       time.Time
}

// TakeKured decides the next value of Kured's lock annotation (cur;
// present says whether the DaemonSet carries it) for w. It never takes over
// an entry that is not expired and not w.Holder's: then it returns
// ErrKuredHolds, naming the holders, and the nodes wait. The holder renews its lock (a new created, w.Now: the
// API server's clock) once a quarter of its TTL has passed: it lapses TTL after the last renewal, and a Kured whose
// clock is ahead by less than three quarters of the TTL (less a pass) never finds it expired while it is held.
//
// With a single lock nodewise holds the one lock for all of the rollout's
// nodes in flight. With a multi-lock it fills every free entry up to
// maxOwners (holder, holder#2, …): Kured's Acquire takes an entry whenever
// one is free or expired, and would reboot a node nodewise is swapping.
func TakeKured(cur string, present bool, w KuredWant) (KuredChange, error) {
	want := len(w.Nodes) > 0
	multi := w.MaxOwners > 1
	if present && cur != "" {
		var probe map[string]json.RawMessage
		if err := json.Unmarshal([]byte(cur), &probe); err != nil {
			return KuredChange{}, fmt.Errorf("Kured's lock %s is not JSON: %w", AnnotationKured, err)
		}
		_, hasLocks := probe["locks"]
		_, hasMax := probe["maxOwners"]
		multi = hasLocks || hasMax
	}
	if multi {
		return takeMulti(cur, present, w, want)
	}
	var v KuredValue
	if present && cur != "" {
		if err := json.Unmarshal([]byte(cur), &v); err != nil {
			return KuredChange{}, fmt.Errorf("Kured's lock %s: %w", AnnotationKured, err)
		}
	}
	mine := present && v.NodeID == w.Holder
	switch {
	case present && !mine && v.NodeID != "" && !v.expired(w.Now):
		if !want {
			return KuredChange{}, nil
		}
		return KuredChange{}, fmt.Errorf("%w by %s (since %s)", ErrKuredHolds, v.NodeID, v.Created.UTC().Format(time.RFC3339))
	case !want && mine:
		return KuredChange{Remove: true}, nil
	case !want:
		return KuredChange{}, nil
	case mine && slices.Equal(v.Metadata.Nodes, w.Nodes) && !renewDue(v, w):
		return KuredChange{}, nil
	}
	b, err := json.Marshal(w.entry(w.Holder))
	if err != nil {
		return KuredChange{}, err
	}
	return KuredChange{Write: true, Value: string(b)}, nil
}

func (w KuredWant) entry(id string) KuredValue {
	return KuredValue{NodeID: id, Metadata: KuredMeta{Nodes: w.Nodes}, Created: w.Now.UTC(), TTL: w.TTL}
}

// renewDue: a quarter of the entry's TTL has passed (or its TTL is not ours).
func renewDue(v KuredValue, w KuredWant) bool {
	return v.TTL != w.TTL || w.Now.Sub(v.Created) >= w.TTL/4
}

func takeMulti(cur string, present bool, w KuredWant, want bool) (KuredChange, error) {
	var m kuredMultiLock
	if present && cur != "" {
		if err := json.Unmarshal([]byte(cur), &m); err != nil {
			return KuredChange{}, fmt.Errorf("Kured's multi-lock %s: %w", AnnotationKured, err)
		}
	}
	// Kured's Acquire counts against its own --concurrency, which may have
	// changed since it wrote maxOwners: fill up to the larger.
	owners := max(m.MaxOwners, w.MaxOwners, 1)
	var others, mine []KuredValue
	var holders []string
	for _, l := range m.Locks {
		switch {
		case ours(l.NodeID, w.Holder):
			mine = append(mine, l)
		case l.expired(w.Now):
			// Kured's Acquire drops it too; keeping it would leave a free entry.
		default:
			others = append(others, l)
			holders = append(holders, l.NodeID)
		}
	}
	if !want {
		if len(mine) == 0 {
			return KuredChange{}, nil
		}
		return marshalMulti(kuredMultiLock{MaxOwners: owners, Locks: others})
	}
	free := owners - len(others)
	if free <= 0 {
		return KuredChange{}, fmt.Errorf("%w: every one of its %d entries, by %s", ErrKuredHolds, owners, strings.Join(holders, ","))
	}
	if len(mine) == free && len(mine) == len(m.Locks)-len(others) {
		fresh := true
		for _, l := range mine {
			fresh = fresh && slices.Equal(l.Metadata.Nodes, w.Nodes) && !renewDue(l, w)
		}
		if fresh {
			return KuredChange{}, nil
		}
	}
	next := kuredMultiLock{MaxOwners: owners, Locks: others}
	for i := 0; i < free; i++ {
		id := w.Holder
		if i > 0 {
			id += "#" + strconv.Itoa(i+1)
		}
		next.Locks = append(next.Locks, w.entry(id))
	}
	return marshalMulti(next)
}

func marshalMulti(m kuredMultiLock) (KuredChange, error) {
	if m.Locks == nil {
		m.Locks = []KuredValue{} // Kured's Release leaves "locks":[]
	}
	b, err := json.Marshal(m)
	if err != nil {
		return KuredChange{}, err
	}
	return KuredChange{Write: true, Value: string(b)}, nil
}

// KuredConcurrency is Kured's --concurrency from its container's arguments,
// or its environment variable KURED_CONCURRENCY, which Kured lets override
// the flag (1 when neither is set or a number: Kured's default).
func KuredConcurrency(args []string, env []corev1.EnvVar) int {
	for _, e := range env {
		if e.Name == "KURED_CONCURRENCY" {
			if n, err := strconv.Atoi(e.Value); err == nil && n > 0 {
				return n
			}
		}
	}
	for i, a := range args {
		a = strings.TrimLeft(a, "-")
		var v string
		switch {
		case strings.HasPrefix(a, "concurrency="):
			v = strings.TrimPrefix(a, "concurrency=")
		case a == "concurrency" && i+1 < len(args):
			v = args[i+1]
		default:
			continue
		}
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			return n
		}
	}
	return 1
}

// NodewiseHolders are the holders nodewise wrote in the lock value (each
// rollout once), so a leader can release those of rollouts that are gone.
func NodewiseHolders(cur string) []string {
	var m struct {
		NodeID string       `json:"nodeID"`
		Locks  []KuredValue `json:"locks"`
	}
	if json.Unmarshal([]byte(cur), &m) != nil {
		return nil
	}
	var out []string
	for _, id := range append([]string{m.NodeID}, func() []string {
		var ids []string
		for _, l := range m.Locks {
			ids = append(ids, l.NodeID)
		}
		return ids
	}()...) {
		if !strings.HasPrefix(id, KuredHolderPrefix) {
			continue
		}
		if i := strings.LastIndex(id, "#"); i > 0 {
			id = id[:i]
		}
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}
