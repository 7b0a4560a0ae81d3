package nodeagent

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nodewise/nodewise/health"
	"github.com/nodewise/nodewise/test/netrig"
)

// meshFake is a MeshSource with fixed answers.
type meshFake struct {
	pods []MeshPod
	zt   Ztunnels
}

func (m meshFake) AmbientPods() ([]MeshPod, error) { return m.pods, nil }
func (m meshFake) Ztunnels() (Ztunnels, error)     { return m.zt, nil }

// istioRules is istio-cni's in-pod layout of its nftables backend (Istio
// 1.27+): outbound connections to port 8080 go to 15001, inbound ones on
// eth0 to 15006; ztunnel's own (mark 1337) pass.
const istioRules = `table inet istio-proxy-nat {
	chain istio-redirect { meta l4proto tcp redirect to :15001; }
	chain istio-in-redirect { meta l4proto tcp redirect to :15006; }
	chain output {
		type nat hook output priority -100; policy accept;
		meta mark 1337 return
		tcp dport 8080 jump istio-redirect
	}
	chain prerouting {
		type nat hook prerouting priority -100; policy accept;
		iifname "eth0" tcp dport 8080 jump istio-in-redirect
	}
}
`

func installRules(t *testing.T, ns, rules string) {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", ns, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft in %s: %v: %s", ns, err, out)
	}
}

func meshPod(p *netrig.Pod) MeshPod {
	return MeshPod{Pod: Pod{Namespace: "rig", Name: p.PodName, UID: p.Name}, Netns: "/run/netns/" + p.Name}
}

// TestEnrollmentChecksOnTheKernel runs each check against real network
// namespaces: istio-cni's rules read with netlink, ztunnel's listeners
// matched to the ztunnel process by socket inode, and a held connection that
// skips ztunnel caught in the socket table.
func TestEnrollmentChecksOnTheKernel(t *testing.T) {
	r := netrig.New(t)
	enrolled, norules, nolisten, oldgen, bypass, peer := r.AddPod("enrolled"), r.AddPod("norules"), r.AddPod("nolisten"), r.AddPod("oldgen"), r.AddPod("bypass"), r.AddPod("peer")
	for _, p := range []*netrig.Pod{enrolled, nolisten, oldgen, bypass} {
		installRules(t, p.Name, istioRules)
	}
	for _, p := range []*netrig.Pod{enrolled, norules, oldgen, bypass} {
		p.StartStandin()
	}
	peer.StartApp("")
	peer.ListenEcho(t, 9090, false)
	// A redirected connection (to the peer's 8080, through the stand-in's
	// 15001) in the enrolled pod and in the bypassing one; a straight one
	// (to 9090, which the rules leave alone) in the bypassing one only.
	for _, p := range []*netrig.Pod{enrolled, bypass} {
		closeAll, err := p.Hold(fmt.Sprintf("%s:%d", peer.IP, netrig.AppPort), 2)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(closeAll)
	}
	closeAll, err := bypass.Hold(fmt.Sprintf("%s:9090", peer.IP), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeAll)
	// A connection of the enrolled pod to its own address (as ztunnel's
	// inbound delivery to the app is) never leaves the pod: not a bypass.
	enrolled.ListenEcho(t, 9090, false)
	closeSelf, err := enrolled.Hold(fmt.Sprintf("%s:9090", enrolled.IP), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeSelf)

	for _, c := range []struct {
		pod      *netrig.Pod
		zt       Ztunnels
		result   health.EnrollmentResult
		failed   health.EnrollmentCheck
		inDetail string
	}{
		{enrolled, Ztunnels{Current: enrolled.StandinPID()}, health.Enrolled, "", ""},
		{norules, Ztunnels{Current: norules.StandinPID()}, health.NotEnrolled, health.CheckRedirection, "no istio-cni rules"},
		{nolisten, Ztunnels{Current: enrolled.StandinPID()}, health.NotEnrolled, health.CheckListeners, "nothing listens on 15001, nothing listens on 15006, nothing listens on 15008"},
		{oldgen, Ztunnels{Current: enrolled.StandinPID(), Older: []int{oldgen.StandinPID()}}, health.NotEnrolled, health.CheckListeners, "only an older ztunnel listens on 15001"},
		{nolisten, Ztunnels{}, health.NotEnrolled, health.CheckListeners, "no ztunnel runs on the node"},
		{bypass, Ztunnels{Current: bypass.StandinPID()}, health.Enrolled, "", fmt.Sprintf("bypass reported only: 1 open connections go straight to their peer, not through ztunnel's outbound listener (first %s:", bypass.IP)},
	} {
		e := CheckEnrollment(meshFake{pods: []MeshPod{meshPod(c.pod)}, zt: c.zt}, "/proc", time.Now())
		if e.Error != "" || len(e.Pods) != 1 {
			t.Fatalf("%s: enrollment %+v", c.pod.PodName, e)
		}
		got := e.Pods[0]
		if got.Result != c.result || got.Failed != c.failed || !strings.Contains(got.Detail, c.inDetail) {
			t.Errorf("%s: got %s, want %s %s with %q", c.pod.PodName, got, c.result, c.failed, c.inDetail)
		}
	}

	gone := MeshPod{Pod: Pod{Namespace: "rig", Name: "gone", UID: "x"}, NoNetns: "no process of the pod runs"}
	e := CheckEnrollment(meshFake{pods: []MeshPod{gone}, zt: Ztunnels{Current: enrolled.StandinPID()}}, "/proc", time.Now())
	if p := e.Pods[0]; p.Result != health.NotCheckable || !strings.Contains(p.Detail, "no process of the pod runs") {
		t.Errorf("a pod without a namespace: %s, want not checkable with the reason", p)
	}
}

// TestSnapshotCarriesEnrollment: with a mesh source, every snapshot holds
// the enrollment and the gauge counts the results.
func TestSnapshotCarriesEnrollment(t *testing.T) {
	r := netrig.New(t)
	in, out := r.AddPod("in"), r.AddPod("out")
	installRules(t, in.Name, istioRules)
	in.StartStandin()
	mesh := meshFake{pods: []MeshPod{meshPod(in), meshPod(out)}, zt: Ztunnels{Current: in.StandinPID()}}
	ra := startAgent(t, ModeProc, NewStaticResolver(nil), func(c *Config) { c.Mesh = mesh })
	s, err := ra.Agent.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if n, total := s.Enrollment.Count(); n != 1 || total != 2 || s.Enrollment.Ztunnel != fmt.Sprintf("pid %d", in.StandinPID()) {
		t.Fatalf("enrollment %+v: want 1 of 2 enrolled, matched against pid %d", s.Enrollment, in.StandinPID())
	}
	_, raw := ra.get(t, "/metrics", ra.files.tokenValue)
	body := string(raw)
	for _, want := range []string{`nodewise_agent_enrollment_pods{result="enrolled"} 1`, `nodewise_agent_enrollment_pods{result="not-enrolled"} 1`, `nodewise_agent_enrollment_pods{result="not-checkable"} 0`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
