package demo

import (
	"fmt"
	"os"
	"testing"

	"github.com/nodewise/nodewise/sim/dataplane"
)

// Each live test starts a cluster and a data plane of its own (own network
// namespaces by prefix, own ports and agents). A test that asserts a halt, a
// reset or a missing pod calls t.Parallel() and runs beside one other (-parallel
// is GOMAXPROCS): load cannot make a faulty build pass. A test that needs a
// healthy build to pass a latency or traffic verdict, or times an event inside
// a soak, stays serial (it runs first, alone): load noise could fail it. So
// does TestDemoCtrlCLeavesNothingBehind, which looks for any process of the
// nodewise binary the tests share.

// TestMain turns the test binary into the ztunnel stand-in when the live
// data plane starts it as one.
func TestMain(m *testing.M) {
	if os.Getenv(dataplane.StandinEnv) == "1" {
		if err := dataplane.RunStandin(); err != nil {
			fmt.Fprintln(os.Stderr, "standin:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}
