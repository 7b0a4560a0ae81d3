package cluster

import (
	"path/filepath"
	"testing"
)

// TestAliveRightAfterStart checks that a child reads as alive the moment
// it has started, and as dead once stopped. The kernel sets up a new
// program's arguments after Go's Start returns, so /proc/PID/cmdline can
// read empty for a moment: taken for death, that made a start-up wait
// report "etcd exited during start-up" with an empty log while etcd ran.
func TestAliveRightAfterStart(t *testing.T) {
	log := filepath.Join(t.TempDir(), "log")
	for i := range 200 {
		p, err := startProcess("sleep", []string{"/bin/sleep", "30"}, log, false)
		if err != nil {
			t.Fatal(err)
		}
		alive := p.alive()
		p.stop(0)
		if !alive {
			t.Fatalf("start %d: a process that had just started read as not alive", i)
		}
		if p.alive() {
			t.Fatalf("start %d: a stopped process still reads as alive", i)
		}
	}
}
