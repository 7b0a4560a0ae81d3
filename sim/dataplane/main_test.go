package dataplane

import (
	"fmt"
	"os"
	"testing"
)

// TestMain turns the test binary into the ztunnel stand-in when the data
// plane starts it as one.
func TestMain(m *testing.M) {
	if os.Getenv(StandinEnv) == "1" {
		if err := RunStandin(); err != nil {
			fmt.Fprintln(os.Stderr, "standin:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}
