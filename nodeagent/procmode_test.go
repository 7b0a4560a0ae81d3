package nodeagent

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nodewise/nodewise/health/wire"
	"github.com/nodewise/nodewise/test/netrig"
)

// both adds up the two sides of one pod, the way /proc sees a namespace.
func both(t testing.TB, s wire.Snapshot, pod string) (sent, recvEstablished, connects, accepts, fails uint64) {
	for _, side := range []wire.Side{wire.SideApp, wire.SideProxy} {
		p := podSide(t, s, pod, side)
		sent += p.ResetsSent
		// /proc has no "resets received"; the fallback derives it from
		// EstabResets, which leaves out resets answering a SYN.
		recvEstablished += p.ResetsReceived - p.ConnectFailures[wire.ConnectRefused]
		connects += p.Connects
		accepts += p.Accepts
		for _, n := range p.ConnectFailures {
			fails += n
		}
	}
	return
}

// TestProcModeAgreesWithEBPF runs an eBPF agent and a proc-mode agent side
// by side through the kill -9 scenario and compares what each reports per
// pod, within what /proc can see (no sides, no histograms, no ages).
func TestProcModeAgreesWithEBPF(t *testing.T) {
	r := netrig.New(t)
	pods, res := rigPods(r, "killed", "survivor", "idle")
	for _, p := range pods {
		p.StartStandin()
	}
	// Proc mode tells namespaces apart by /proc/<pid>/net/snmp's inode
	// (readable without ptrace rights): its resolver is keyed that way.
	procRes := NewStaticResolver(nil)
	for n, p := range pods {
		id, err := KeyProcNet.of(fmt.Sprintf("/proc/%d", p.PausePID))
		if err != nil {
			t.Fatal(err)
		}
		procRes.Set(id, Pod{Namespace: "rig", Name: n, UID: p.Name})
	}
	ebpfAgent := startAgent(t, ModeEBPF, res, nil)
	procAgent := startAgent(t, ModeProc, procRes, nil)

	loads := map[string]*netrig.Load{}
	for _, n := range []string{"killed", "survivor"} {
		loads[n] = pods[n].StartLoad(netrig.LoadOptions{
			Target: fmt.Sprintf("%s:15001", pods[n].IP), Short: 2, ShortGap: 5 * time.Millisecond, Streams: 6,
		})
	}
	time.Sleep(time.Second)
	pods["killed"].KillStandin()
	time.Sleep(500 * time.Millisecond)
	observed := map[string]netrig.Observed{}
	for n, l := range loads {
		observed[n] = l.Stop()
	}
	time.Sleep(200 * time.Millisecond)

	es, ps := ebpfAgent.snapshot(t), procAgent.snapshot(t)
	if ps.Mode != wire.ModeProc {
		t.Fatalf("proc agent reports mode %q", ps.Mode)
	}
	for _, n := range []string{"killed", "survivor", "idle"} {
		sent, recv, connects, accepts, fails := both(t, es, n)
		pa := podSide(t, ps, n, wire.SideApp)
		pp := podSide(t, ps, n, wire.SideProxy)
		t.Logf("%s: observed %+v", n, observed[n])
		t.Logf("  ebpf: sent=%d recvEstablished=%d connects=%d accepts=%d fails=%d", sent, recv, connects, accepts, fails)
		t.Logf("  proc: %s", describe(pa))
		checks := []struct {
			what       string
			ebpf, proc uint64
		}{
			{"resets sent (OutRsts)", sent, pa.ResetsSent},
			{"connects (ActiveOpens - AttemptFails)", connects, pa.Connects},
			{"accepts (PassiveOpens)", accepts, pa.Accepts},
			{"failed connects (AttemptFails)", fails, pa.ConnectFailures[wire.ConnectOther]},
		}
		var bad []string
		for _, c := range checks {
			if c.ebpf != c.proc {
				bad = append(bad, fmt.Sprintf("%s: ebpf %d, proc %d", c.what, c.ebpf, c.proc))
			}
		}
		// EstabResets also counts connections this namespace tore down
		// itself with a reset for no TCPAbortOn* reason (a dying listener
		// resets the connections still in its accept queue), so proc may
		// exceed eBPF, but only by resets this namespace sent that were not
		// answers to SYNs.
		refusals := podSide(t, es, n, wire.SideApp).ConnectFailures[wire.ConnectRefused]
		if pa.ResetsReceived < recv || pa.ResetsReceived-recv > sent-refusals {
			bad = append(bad, fmt.Sprintf("resets received on established connections: ebpf %d, proc %d (may exceed by at most %d local aborts)",
				recv, pa.ResetsReceived, sent-refusals))
		}
		if len(bad) > 0 {
			t.Errorf("%s: modes disagree:\n  %s", n, strings.Join(bad, "\n  "))
		}
		if pp.ResetsSent+pp.ResetsReceived+pp.Connects != 0 || sum(pa.ConnectLatency.Buckets)+sum(pa.ConnAges) != 0 {
			t.Errorf("%s: proc mode reported what it cannot see: proxy %s, app %s", n, describe(pp), describe(pa))
		}
	}
	if observed["killed"].Resets == 0 {
		t.Errorf("the kill made no resets: %+v", observed["killed"])
	}
}
