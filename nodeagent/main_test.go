package nodeagent

import (
	"os"
	"testing"

	"github.com/nodewise/nodewise/test/netrig"
)

func TestMain(m *testing.M) {
	netrig.RunStandinIfChild() // the rig re-executes this binary as the ztunnel stand-in
	runBenchAgentIfChild()     // and the benchmark as a separate agent process
	os.Exit(m.Run())
}
