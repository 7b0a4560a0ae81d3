package locks

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

var lockNow = time.Date(2026, 12, 4, 19, 0, 0, 0, time.UTC)

func want(nodes ...string) KuredWant {
	return KuredWant{Holder: "nodewise:r1", Nodes: nodes, MaxOwners: 1, TTL: 10 * time.Minute, Now: lockNow}
}

// kuredSingle is a lock as Kured's DaemonSetSingleLock.Acquire writes it.
func kuredSingle(node string, created time.Time, ttl time.Duration) string {
	b, _ := json.Marshal(map[string]any{"nodeID": node, "metadata": map[string]bool{"unschedulable": false}, "created": created, "TTL": ttl})
	return string(b)
}

// kuredAcquireSingle is Kured's single Acquire decision: a lock that is not
// expired is taken only by its own holder.
func kuredAcquireSingle(t *testing.T, v string, node string, now time.Time) bool {
	t.Helper()
	var l KuredValue
	if err := json.Unmarshal([]byte(v), &l); err != nil {
		t.Fatalf("Kured cannot read %s: %v", v, err)
	}
	if !(l.TTL > 0 && now.Sub(l.Created) >= l.TTL) {
		return l.NodeID == node
	}
	return true
}

// kuredAcquireMulti is Kured's canAcquireMultiple.
func kuredAcquireMulti(t *testing.T, v string, maxOwners int, now time.Time) bool {
	t.Helper()
	var m kuredMultiLock
	if err := json.Unmarshal([]byte(v), &m); err != nil {
		t.Fatalf("Kured cannot read %s: %v", v, err)
	}
	if len(m.Locks) < maxOwners {
		return true
	}
	for _, l := range m.Locks {
		if l.TTL > 0 && now.Sub(l.Created) >= l.TTL {
			return true
		}
	}
	return false
}

func TestTakeKuredSingleLock(t *testing.T) {
	// No lock yet: nodewise writes one Kured reads as held by nodewise:r1.
	ch, err := TakeKured("", false, want("node-2", "node-1"))
	if err != nil || !ch.Write {
		t.Fatalf("free lock: %+v, %v; want a write", ch, err)
	}
	var l KuredValue
	if err := json.Unmarshal([]byte(ch.Value), &l); err != nil {
		t.Fatal(err)
	}
	if l.NodeID != "nodewise:r1" || !l.Created.Equal(lockNow) || l.TTL != 10*time.Minute || strings.Join(l.Metadata.Nodes, ",") != "node-2,node-1" {
		t.Errorf("lock %s", ch.Value)
	}
	if !strings.Contains(ch.Value, `"TTL":600000000000`) || !strings.Contains(ch.Value, `"created":"2026-12-04T19:00:00Z"`) {
		t.Errorf("lock %s: want Kured's encoding (created RFC 3339, TTL in nanoseconds)", ch.Value)
	}
	for _, node := range []string{"node-1", "node-2", "node-9"} {
		if kuredAcquireSingle(t, ch.Value, node, lockNow.Add(time.Minute)) {
			t.Errorf("Kured on %s acquires nodewise's lock %s", node, ch.Value)
		}
	}
	// The TTL lapses for Kured if nobody renews it.
	if !kuredAcquireSingle(t, ch.Value, "node-9", lockNow.Add(10*time.Minute)) {
		t.Errorf("Kured cannot take nodewise's lock after its TTL")
	}

	// Held and fresh: nothing to write; nodes changed or half the TTL gone: rewrite.
	w := want("node-1", "node-2")
	ch, _ = TakeKured("", false, w)
	if c, err := TakeKured(ch.Value, true, w); err != nil || c.Write || c.Remove {
		t.Errorf("fresh own lock: %+v, %v; want no change", c, err)
	}
	w.Now = lockNow.Add(4 * time.Minute)
	if c, _ := TakeKured(ch.Value, true, want("node-1")); !c.Write {
		t.Errorf("nodes changed: %+v, want a write", c)
	}
	w.Now = lockNow.Add(5 * time.Minute)
	if c, _ := TakeKured(ch.Value, true, w); !c.Write || !strings.Contains(c.Value, "19:05:00Z") {
		t.Errorf("half the TTL gone: %+v, want a renewal", c)
	}
	// Nothing in flight: the lock goes.
	if c, _ := TakeKured(ch.Value, true, want()); !c.Remove {
		t.Errorf("release: %+v, want Remove", c)
	}

	// Kured holds it (TTL 0: forever): nodewise waits, and never writes.
	kured := kuredSingle("node-3", lockNow.Add(-time.Hour), 0)
	c, err := TakeKured(kured, true, want("node-1"))
	if !errors.Is(err, ErrKuredHolds) || c.Write || !strings.Contains(err.Error(), "node-3") {
		t.Errorf("Kured's lock: %+v, %v; want ErrKuredHolds naming node-3", c, err)
	}
	if c, err := TakeKured(kured, true, want()); err != nil || c.Write || c.Remove {
		t.Errorf("release beside Kured's lock: %+v, %v; want no change", c, err)
	}
	// Kured's own lock expired (its --lock-ttl): nodewise may take it, as Kured would.
	stale := kuredSingle("node-3", lockNow.Add(-2*time.Hour), time.Hour)
	if c, err := TakeKured(stale, true, want("node-1")); err != nil || !c.Write || !strings.Contains(c.Value, "nodewise:r1") {
		t.Errorf("stale Kured lock: %+v, %v; want taken", c, err)
	}
	// Another rollout's lock is not this one's.
	other, _ := TakeKured("", false, KuredWant{Holder: "nodewise:r2", Nodes: []string{"n"}, TTL: time.Minute, Now: lockNow})
	if _, err := TakeKured(other.Value, true, want("node-1")); !errors.Is(err, ErrKuredHolds) {
		t.Errorf("another rollout's lock: %v, want ErrKuredHolds", err)
	}
	if _, err := TakeKured("{nodeID", true, want("node-1")); err == nil {
		t.Error("a lock that is not JSON: no error")
	}
}

func TestTakeKuredMultiLock(t *testing.T) {
	w := want("node-1")
	w.MaxOwners = 3
	// No annotation, Kured --concurrency=3: nodewise fills every entry.
	ch, err := TakeKured("", false, w)
	if err != nil || !ch.Write {
		t.Fatalf("%+v, %v", ch, err)
	}
	var m kuredMultiLock
	if err := json.Unmarshal([]byte(ch.Value), &m); err != nil {
		t.Fatal(err)
	}
	if m.MaxOwners != 3 || len(m.Locks) != 3 || m.Locks[0].NodeID != "nodewise:r1" || m.Locks[2].NodeID != "nodewise:r1#3" {
		t.Errorf("multi-lock %s", ch.Value)
	}
	if kuredAcquireMulti(t, ch.Value, 3, lockNow.Add(time.Minute)) {
		t.Errorf("Kured acquires an entry of %s", ch.Value)
	}
	if got := NodewiseHolders(ch.Value); fmt.Sprint(got) != "[nodewise:r1]" {
		t.Errorf("holders %v", got)
	}
	if c, err := TakeKured(ch.Value, true, w); err != nil || c.Write {
		t.Errorf("fresh own multi-lock: %+v, %v; want no change", c, err)
	}

	// Kured holds one entry (and one expired): nodewise fills the rest, keeps Kured's.
	kured := fmt.Sprintf(`{"maxOwners":3,"locks":[%s,%s]}`, kuredSingle("node-7", lockNow.Add(-time.Minute), 0), kuredSingle("node-8", lockNow.Add(-2*time.Hour), time.Hour))
	c, err := TakeKured(kured, true, w)
	if err != nil || !c.Write {
		t.Fatalf("%+v, %v", c, err)
	}
	m = kuredMultiLock{}
	_ = json.Unmarshal([]byte(c.Value), &m)
	if len(m.Locks) != 3 || m.Locks[0].NodeID != "node-7" || m.Locks[1].NodeID != "nodewise:r1" || m.Locks[2].NodeID != "nodewise:r1#2" {
		t.Errorf("multi-lock beside Kured %s", c.Value)
	}
	if kuredAcquireMulti(t, c.Value, 3, lockNow.Add(time.Minute)) {
		t.Errorf("Kured acquires an entry of %s", c.Value)
	}
	// Release keeps Kured's entry and the format Kured reads.
	r, _ := TakeKured(c.Value, true, want())
	if !r.Write || !strings.Contains(r.Value, "node-7") || strings.Contains(r.Value, "nodewise") || !strings.Contains(r.Value, `"maxOwners":3`) {
		t.Errorf("release %+v", r)
	}
	// Every entry Kured's: nodewise waits.
	full := fmt.Sprintf(`{"maxOwners":2,"locks":[%s,%s]}`, kuredSingle("node-7", lockNow, 0), kuredSingle("node-8", lockNow, 0))
	if _, err := TakeKured(full, true, want("node-1")); !errors.Is(err, ErrKuredHolds) || !strings.Contains(err.Error(), "node-7,node-8") {
		t.Errorf("full multi-lock: %v", err)
	}
	// Kured's --concurrency raised since it wrote maxOwners 2: its Acquire counts to 3.
	w3 := want("node-1")
	w3.MaxOwners = 3
	if c, err := TakeKured(`{"maxOwners":2,"locks":[]}`, true, w3); err != nil || kuredAcquireMulti(t, c.Value, 3, lockNow) {
		t.Errorf("multi-lock under a raised concurrency: %+v, %v; Kured acquires an entry", c, err)
	}
	// Kured's Release leaves "locks":[]: still a multi-lock, whatever the args say.
	if c, _ := TakeKured(`{"maxOwners":2,"locks":[]}`, true, want("node-1")); !strings.Contains(c.Value, `"locks":[`) {
		t.Errorf("empty multi-lock rewritten as %s", c.Value)
	}
}

func TestKuredConcurrency(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  []corev1.EnvVar
		want int
	}{
		{nil, nil, 1},
		{[]string{"/usr/bin/kured", "--ds-name=kured", "--concurrency=3"}, nil, 3},
		{[]string{"--concurrency", "2"}, nil, 2},
		{[]string{"-concurrency=x"}, nil, 1},
		{[]string{"--concurrency=3"}, []corev1.EnvVar{{Name: "KURED_CONCURRENCY", Value: "2"}}, 2}, // Kured: the variable wins
	} {
		if got := KuredConcurrency(c.args, c.env); got != c.want {
			t.Errorf("%v: %d, want %d", c.args, got, c.want)
		}
	}
}
