package demo

import (
	"fmt"
	"os"
	"testing"

	"github.com/nodewise/nodewise/sim/dataplane"
)

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
