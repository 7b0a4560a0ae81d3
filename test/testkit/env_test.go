package testkit

import (
	"runtime"
	"strings"
	"testing"
)

// recorder is a testing.TB that records how it was ended; it ends its own
// goroutine, as testing's FailNow and SkipNow do.
type recorder struct {
	testing.TB
	fatal, skip string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Fatalf(format string, args ...any) { r.fatal = format; runtime.Goexit() }
func (r *recorder) Skipf(format string, args ...any)  { r.skip = format; runtime.Goexit() }

// end runs Unavailable on r in a goroutine of its own and waits for it.
func end(r *recorder) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		Unavailable(r, "no %s", "ip")
	}()
	<-done
}

func TestUnavailableFailsUnderMakeTest(t *testing.T) {
	t.Setenv(StrictEnv, "1")
	r := &recorder{TB: t}
	end(r)
	if r.fatal == "" || r.skip != "" {
		t.Fatalf("strict: fatal %q skip %q, want a failure and no skip", r.fatal, r.skip)
	}
}

func TestUnavailableSkipsOutsideMakeTest(t *testing.T) {
	t.Setenv(StrictEnv, "")
	r := &recorder{TB: t}
	end(r)
	if r.skip == "" || r.fatal != "" || !strings.HasPrefix(r.skip, "SKIP: ") {
		t.Fatalf("not strict: fatal %q skip %q, want a SKIP and no failure", r.fatal, r.skip)
	}
}
