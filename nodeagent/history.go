package nodeagent

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/nodewise/nodewise/health/wire"
)

// history is the agent's ring of recent snapshots, oldest first: one taken
// every Config.HistoryEvery, kept for Config.HistoryKeep, so the judge reads
// a node's baseline from it instead of waiting it out. Each entry is held
// as gzip-compressed JSON (a snapshot of 110 pods is about 200 KB as JSON,
// at most about 80 KB compressed with every bucket busy, far less with the
// zero buckets of a real node), and the whole ring never
// holds more than maxBytes: past it the oldest entries go first, so the
// bound holds whatever the pod count. It lives in memory only: the
// counters reset when the agent restarts, and the history with them.
type history struct {
	every, keep time.Duration
	maxBytes    int

	mu      sync.Mutex
	entries []historyEntry
	bytes   int
	buf     bytes.Buffer
	zw      *gzip.Writer
}

type historyEntry struct {
	time time.Time
	data []byte // gzip-compressed JSON of a wire.Snapshot
}

func newHistory(every, keep time.Duration, maxBytes int) *history {
	h := &history{every: every, keep: keep, maxBytes: maxBytes}
	h.zw, _ = gzip.NewWriterLevel(&h.buf, gzip.BestSpeed) // a valid level never errs
	return h
}

// add appends a snapshot, then drops the entries older than keep (by the
// snapshot's time) and the oldest while the ring is over maxBytes.
func (h *history) add(s wire.Snapshot) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.buf.Reset()
	h.zw.Reset(&h.buf)
	if err := json.NewEncoder(h.zw).Encode(s); err != nil {
		return fmt.Errorf("encoding a history snapshot: %w", err)
	}
	if err := h.zw.Close(); err != nil {
		return fmt.Errorf("compressing a history snapshot: %w", err)
	}
	e := historyEntry{time: s.Time, data: bytes.Clone(h.buf.Bytes())}
	h.entries = append(h.entries, e)
	h.bytes += len(e.data)
	cut := s.Time.Add(-h.keep)
	drop := 0
	for drop < len(h.entries)-1 && (h.entries[drop].time.Before(cut) || h.bytes > h.maxBytes) {
		h.bytes -= len(h.entries[drop].data)
		drop++
	}
	if drop > 0 {
		h.entries = append(h.entries[:0:0], h.entries[drop:]...)
	}
	return nil
}

// since decodes the entries taken at or after t, oldest first.
func (h *history) since(t time.Time) ([]wire.Snapshot, error) {
	h.mu.Lock()
	i := sort.Search(len(h.entries), func(i int) bool { return !h.entries[i].time.Before(t) })
	list := append([]historyEntry(nil), h.entries[i:]...)
	h.mu.Unlock()
	out := make([]wire.Snapshot, 0, len(list))
	for _, e := range list {
		zr, err := gzip.NewReader(bytes.NewReader(e.data))
		if err != nil {
			return nil, fmt.Errorf("reading a history snapshot: %w", err)
		}
		var s wire.Snapshot
		err = json.NewDecoder(zr).Decode(&s)
		if err == nil {
			_, err = io.Copy(io.Discard, zr)
		}
		if err != nil {
			return nil, fmt.Errorf("decoding a history snapshot: %w", err)
		}
		out = append(out, s)
	}
	return out, nil
}

// size is the entries held and their bytes.
func (h *history) size() (entries, bytes int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.entries), h.bytes
}
