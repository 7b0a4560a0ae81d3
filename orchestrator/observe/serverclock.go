package observe

import (
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ServerClock is the API server's clock as this process measures it: the
// time the API server stamps on a write of this process (its managed fields
// entry, to the second) against the local clock around the request. A time
// written for another process to compare with its own clock (Kured's lock,
// read by Kured on every node) is the API server's, so this host's clock
// skew does not move it. The zero value reads the local clock until a
// first measure.
type ServerClock struct {
	mu     sync.Mutex
	offset time.Duration // the API server's clock minus the local one
}

// Now is the API server's time when the local clock reads local.
func (c *ServerClock) Now(local time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return local.Add(c.offset)
}

// Observe measures the offset from obj, the API server's answer to a write
// of manager's (an Update, the fields it owns changed) sent at local time
// sent and answered at answered: the server stamped the entry between the
// two, and truncated its time to the second, so the middle of both spans is
// taken. It reports how far the measure moved the clock, and whether obj
// had such an entry.
func (c *ServerClock) Observe(obj metav1.Object, manager string, sent, answered time.Time) (moved time.Duration, ok bool) {
	var stamp time.Time
	for _, f := range obj.GetManagedFields() {
		if f.Manager == manager && f.Operation == metav1.ManagedFieldsOperationUpdate && f.Subresource == "" && f.Time != nil {
			stamp = f.Time.Time
		}
	}
	if stamp.IsZero() {
		return 0, false
	}
	local := sent.Add(answered.Sub(sent) / 2)
	c.mu.Lock()
	defer c.mu.Unlock()
	offset := stamp.Add(500 * time.Millisecond).Sub(local).Round(time.Millisecond)
	moved, c.offset = offset-c.offset, offset
	return moved, true
}
